#include "npu_format.h"

#include "acl_table.h"
#include "torch_npu/csrc/core/npu/NPUFormat.h"

namespace torch_npu_ipc {

int64_t npu_format(const at::Tensor& t) { return at_npu::native::get_npu_format(t); }

bool base_format(const at::Tensor& t) {
  const int64_t f = npu_format(t);
  return f == ACL_FORMAT_ND || f == ACL_FORMAT_NCHW || f == ACL_FORMAT_NHWC || f == ACL_FORMAT_NCDHW;
}

}  // namespace torch_npu_ipc
