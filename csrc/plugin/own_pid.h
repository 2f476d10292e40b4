// This process's pid, cached. glibc makes every getpid() a system call, and
// the sharing path asks for it several times per tensor (descriptor, slot
// claims, owner checks); a forked child sees its own pid.
#pragma once

#include <cstdint>

namespace torch_npu_ipc {

int32_t own_pid();

}  // namespace torch_npu_ipc
