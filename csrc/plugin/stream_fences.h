// Waiting, from a thread of the plugin's own, for the work queued so far on
// a set of torch_npu streams: an event recorded on each (after torch_npu's
// task queue handed the stream's earlier work to the runtime), then waited
// for on the host.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "acl_abi.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace torch_npu_ipc {

// Appends `stream` to `streams` unless it is there already.
void add_stream(std::vector<c10_npu::NPUStream>* streams, const c10_npu::NPUStream& stream);

// Event fences for one thread: one event per device, created on first use
// and reused (the thread waits for each record before the next). Its owners
// are never destroyed, like the threads that use them.
class StreamFences {
 public:
  // `where`: the owning thread, named in a kept queue report
  // (queue_error.h).
  explicit StreamFences(const char* where) : where_(where) {}

  // Returns once the work queued so far on `streams` has run; how many of
  // them it synchronized instead, having no fence for them (torch_npu's
  // queue failed, no event left, the runtime is going away): it then waited
  // for what the stream has at the runtime, which is all it can still run.
  int64_t fence(const std::vector<c10_npu::NPUStream>& streams);

 private:
  aclrtEvent fence_for(c10::DeviceIndex device);

  const char* where_;
  std::map<c10::DeviceIndex, aclrtEvent> fences_;
};

}  // namespace torch_npu_ipc
