// Broadcasting rules and operand resolution for the strided kernels.
#include "strided.h"

#include <algorithm>

#include "dtype.h"
#include "status.h"

namespace aclsim::opapi {

namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace

std::vector<int64_t> broadcast_shapes(const char* op, const std::vector<int64_t>& a,
                                      const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) {
      throw_invalid(std::string(op) + ": shapes " + shape_string(a) + " and " + shape_string(b) +
                    " do not broadcast");
    }
    out[rank - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

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

Operand contiguous_operand(void* base, aclDataType dtype, const std::vector<int64_t>& shape) {
  Operand op;
  op.base = static_cast<char*>(base);
  op.dtype = dtype;
  op.byte_strides.assign(shape.size(), 0);
  int64_t stride = static_cast<int64_t>(element_size(dtype));
  for (size_t i = shape.size(); i > 0; --i) {
    op.byte_strides[i - 1] = stride;
    stride *= shape[i - 1];
  }
  return op;
}

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace aclsim::opapi
