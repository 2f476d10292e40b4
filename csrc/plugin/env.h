// The plugin's settings from the environment (TORCH_NPU_IPC_*).
#pragma once

#include <cstdint>

namespace torch_npu_ipc {

// The integer in environment variable `name` (ASCII digits only), at most
// `largest`; `fallback` when it is unset or empty. torch_npu_ipc._env refuses
// a malformed or too large value at import with a message naming the
// variable; one that slips past (set after import) reads as `fallback` (never
// as 0), or as `largest` when it is too large.
int64_t env_int(const char* name, int64_t fallback, int64_t largest);

}  // namespace torch_npu_ipc
