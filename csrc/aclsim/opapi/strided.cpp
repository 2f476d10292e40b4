// Broadcasting rules and operand resolution for the strided kernels.
#include "strided.h"

#include "dtype.h"

namespace aclsim::opapi {

bool broadcasts_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] != to[lead + i] && from[i] != 1) return false;
  }
  return true;
}

Operand make_operand(const TensorDesc& t, const std::vector<int64_t>& shape) {
  Operand op;
  op.base = t.origin();
  op.dtype = t.dtype;
  op.byte_strides.assign(shape.size(), 0);
  const auto item = static_cast<int64_t>(element_size(t.dtype));
  const size_t lead = shape.size() - t.shape.size();
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] != 1) op.byte_strides[lead + i] = t.strides[i] * item;
  }
  return op;
}

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace aclsim::opapi
