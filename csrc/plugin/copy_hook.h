// The dispatcher hook that routes ordinary Tensor.to() / copy_() calls
// between two NPUs to the event barrier (copy_barrier.h).
//
// It registers boxed kernels for aten::copy_ and aten::_to_copy (a
// torch::Library owned by this module). On torch >= 2.9 they sit under the
// PrivateUse1 key, and every call that is not an NPU -> other-NPU copy is
// handed to the kernel torch_npu had registered, captured before ours was
// installed (c10::SafeKernelFunction). Older torch cannot capture it: there
// they sit under BackendSelect and hand a call on by redispatching below that
// key. Disabling destroys the Library, which restores the dispatcher's
// previous kernels.
#pragma once

#include <cstdint>
#include <string>

#include "copy_barrier.h"

namespace torch_npu_ipc {

// Installs the dispatcher hook (idempotent) in `mode`.
void copies_enable(CopyMode mode);
// Removes the hook: torch_npu's own kernels run again.
void copies_disable();
bool copies_enabled();
CopyMode copies_mode();
// The dispatch key the hook registers at: "PrivateUse1" (torch >= 2.9, which
// can capture the kernel it shadows) or "BackendSelect" (older torch).
std::string copies_dispatch_key();
// Calls the hook handed to torch_npu's own kernel.
uint64_t copies_delegated();

}  // namespace torch_npu_ipc
