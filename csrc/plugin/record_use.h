// Marking a block used on a stream: what torch's recordStream does, for every
// kind of block and stream the plugin meets.
//
// The caching allocator defers reusing a block until the work queued so far
// on each stream it was marked with has run. Two cases need more than
// torch_npu's NPUCachingAllocator::recordStream:
// - shared or received memory carries the plugin's deleter, which torch_npu's
//   allocator no longer recognizes (it would silently ignore the mark);
// - an external stream, on which torch_npu refuses the event record it makes
//   for each mark when the block is freed, inside the block's deleter.
// The cross-device copy (its source and destination blocks) and the device
// guard wrapper (autograd's marks) both come here.
#pragma once

#include <c10/core/Allocator.h>

#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace torch_npu_ipc {

// Defers the reuse of `ptr`'s block until the work queued on `stream` so far
// ran: shared or received memory through sharing's ledger
// (record_shared_use), an external stream through a pool stream that waits
// for it (record_external_use), any other block through torch_npu's caching
// allocator. A null pointer is left alone.
void record_use(const c10::DataPtr& ptr, const c10_npu::NPUStream& stream);

}  // namespace torch_npu_ipc
