// torch_npu's storage formats: which ones lay elements out as plain strided memory.
#pragma once

#include <ATen/ATen.h>

namespace torch_npu_ipc {

// True when `t`'s storage is in a base format (ND, NCHW, NHWC, NCDHW): its bytes
// are the elements in stride order. torch_npu's private formats (FRACTAL_NZ,
// NC1HWC0, ...) keep them in tiles. Reads the storage's description: no
// operator runs (a dispatched query would first materialize a conj/neg view).
bool base_format(const at::Tensor& t);

// The ACL format number of `t`'s storage (FRACTAL_NZ is 29).
int64_t npu_format(const at::Tensor& t);

}  // namespace torch_npu_ipc
