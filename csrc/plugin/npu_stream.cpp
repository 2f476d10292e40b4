#include "npu_stream.h"

#include <c10/util/Exception.h>

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
  // synchronization) and returns the runtime's stream.
  return stream.stream();
}

}  // namespace torch_npu_ipc
