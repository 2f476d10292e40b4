// The plugin's settings from the environment (TORCH_NPU_IPC_*).
#pragma once

#include <cstdint>

namespace torch_npu_ipc {

// The non-negative integer in environment variable `name`, or `fallback`
// when it is unset or empty. torch_npu_ipc._env refuses a malformed value at
// import with a message naming the variable; one that slips past (set after
// import) reads as `fallback`, never as 0.
int64_t env_int(const char* name, int64_t fallback);

}  // namespace torch_npu_ipc
