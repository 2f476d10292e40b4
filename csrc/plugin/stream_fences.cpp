#include "stream_fences.h"

#include <algorithm>

#include "acl_device_guard.h"
#include "acl_table.h"
#include "npu_stream.h"
#include "queue_error.h"

namespace torch_npu_ipc {

void add_stream(std::vector<c10_npu::NPUStream>* streams, const c10_npu::NPUStream& stream) {
  if (std::find(streams->begin(), streams->end(), stream) == streams->end()) streams->push_back(stream);
}

int64_t StreamFences::fence(const std::vector<c10_npu::NPUStream>& streams) {
  int64_t synchronized = 0;
  for (const auto& stream : streams) {
    bool fenced = false;
    try {
      AclDeviceGuard guard(stream.device_index());
      // Draining a failed queue takes torch_npu's one report of it: kept.
      aclrtStream raw = keeping_queue_report(where_, [&] { return drained(stream); });
      aclrtEvent fence = fence_for(stream.device_index());
      if (raw != nullptr && fence != nullptr && handled(acl().RecordEvent(fence, raw)) == ACL_SUCCESS) {
        fenced = handled(acl().SynchronizeEvent(fence)) == ACL_SUCCESS;
      }
    } catch (...) {
    }
    if (fenced) continue;
    ++synchronized;
    try {
      AclDeviceGuard guard(stream.device_index());
      aclrtStream raw = stream.stream(/*need_empty=*/false);
      if (raw != nullptr && acl().SynchronizeStream != nullptr) (void)handled(acl().SynchronizeStream(raw));
    } catch (...) {
      // Nothing left to wait on: going on is still right.
    }
  }
  return synchronized;
}

aclrtEvent StreamFences::fence_for(c10::DeviceIndex device) {
  auto it = fences_.find(device);
  if (it != fences_.end()) return it->second;
  aclrtEvent fence = nullptr;
  auto create = acl().CreateEventExWithFlag;
  if (create == nullptr || handled(create(&fence, ACL_EVENT_SYNC)) != ACL_SUCCESS) return nullptr;
  fences_.emplace(device, fence);
  return fence;
}

}  // namespace torch_npu_ipc
