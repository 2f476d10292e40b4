#include "record_use.h"

#include "external_stream.h"
#include "sharing.h"
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"

namespace torch_npu_ipc {

void record_use(const c10::DataPtr& ptr, const c10_npu::NPUStream& stream) {
  if (ptr.get() == nullptr || record_shared_use(ptr, stream)) return;
  if (is_external(stream)) {
    record_external_use(ptr, stream);
  } else {
    c10_npu::NPUCachingAllocator::recordStream(ptr, stream);
  }
}

}  // namespace torch_npu_ipc
