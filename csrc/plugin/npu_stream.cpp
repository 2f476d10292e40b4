#include "npu_stream.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "acl_table.h"
#include "task_queue.h"

namespace torch_npu_ipc {

c10_npu::NPUStream to_npu_stream(const StreamRef& ref) {
  auto type = static_cast<c10::DeviceType>(ref.device_type);
  TORCH_CHECK(type == c10::DeviceType::PrivateUse1, "expected an NPU stream, got a stream of device type ",
              c10::DeviceTypeName(type));
  return c10_npu::NPUStream(c10::Stream::unpack3(static_cast<c10::StreamId>(ref.stream_id),
                                                 static_cast<c10::DeviceIndex>(ref.device_index), type));
}

aclrtStream drained(const c10_npu::NPUStream& stream) {
  // NPUStream::stream() waits until torch_npu's queue thread has submitted
  // every task queued for this stream (a host-side handoff, not a device
  // synchronization) and returns the runtime's stream. Without per-stream
  // queues (the default) it drains the queue of the default stream of
  // torch_npu's *current* device, not of the stream's device: make the
  // stream's device current in torch_npu (which caches it per thread; an
  // AclDeviceGuard does not update that cache) for the call.
  auto get = acl().GetDevice;
  int32_t acl_device = -1;
  if (get == nullptr || handled(get(&acl_device)) != ACL_SUCCESS) acl_device = -1;
  aclrtStream raw = nullptr;
  {
    c10::DeviceGuard guard(stream.device());
    raw = stream.stream();
  }
  // Restoring torch_npu's device went through aclrtSetDevice: put back the
  // ACL device the caller chose (e.g. with an AclDeviceGuard).
  int32_t now = -1;
  if (acl_device >= 0 && handled(get(&now)) == ACL_SUCCESS && now != acl_device && acl().SetDevice != nullptr) {
    (void)handled(acl().SetDevice(acl_device));
  }
  return raw;
}

aclrtStream launched(const c10_npu::NPUStream& stream) {
  if (!runs_queued(stream)) return stream.stream(/*need_empty=*/false);
  aclrtStream raw = drained(stream);
  TORCH_CHECK(raw != nullptr, "torch_npu failed to flush its task queue for npu:", int(stream.device_index()));
  return raw;
}

}  // namespace torch_npu_ipc
