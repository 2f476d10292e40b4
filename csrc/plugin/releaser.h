// The receiver's deferred release: a received storage that died gives its
// slot back to the producer only once the receiver's streams finished with
// the memory. The wait runs on a thread of its own, off the thread that
// dropped the storage (which may be torch_npu's queue thread, where flushing
// the queue would deadlock).
#pragma once

#include <cstdint>
#include <memory>

#include "received.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace torch_npu_ipc {

// Queues `item` for release after the work queued so far on `stream` (the
// stream current at the drop) and on its `used_on` streams: then its
// mapping closes and its slot is released. `item` is moved from only once
// queued: if this throws, the caller still owns it.
void release_after_use(std::unique_ptr<Received>&& item, const c10_npu::NPUStream& stream);

// Releases that synchronized a stream instead, having no fence for it.
int64_t release_syncs();

}  // namespace torch_npu_ipc
