// What a receiver keeps for each storage it rebuilt from a descriptor.
//
// sharing.cpp makes it (rebuild) and hands it on when the storage dies; the
// releaser (releaser.h) gives its slot back once the receiver's streams are
// done with the memory, and the exit fencer (exit_fencer.h) marks its slot
// when the producer, exiting, asks.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "ipc_memory.h"
#include "ref_table.h"
#include "sharing.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace torch_npu_ipc {

// One reference slot in a producer's table.
struct Ref {
  std::shared_ptr<RefTable> table;
  SlotRef slot;
  bool live() const { return table->live(slot); }
};

// Context of a storage rebuilt in a receiver (its DataPtr's).
struct Received {
  Ref ref;
  std::shared_ptr<Import> import;
  Descriptor origin;  // to forward the block to a third process
  std::mutex mu;
  // Guarded by mu: the stream that waited for the producer, then
  // Tensor.record_stream's streams.
  std::vector<c10_npu::NPUStream> used_on;
};

}  // namespace torch_npu_ipc
