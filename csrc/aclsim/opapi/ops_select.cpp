// torch.masked_select(self, mask): aclnnMaskedSelect (self, mask, out).
//
// The output's size depends on the data. As on CANN, the caller allocates a
// 1-D `out` big enough for every element of broadcast(self, mask), runs the
// operator, synchronizes the stream and asks aclGetViewShape(out) for the
// real size, then shrinks out to it (torch_npu's EXEC_NPU_CMD_SYNC path).
// The kernel records that size in the out tensor's ResultShape.
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>

#include "dtype.h"
#include "opapi.h"

namespace aclsim::opapi {

namespace {

// The shape both broadcast to; throws naming the shapes when there is none.
std::vector<int64_t> broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> shape(std::max(a.size(), b.size()));
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) {
      throw_invalid("self of shape " + shape_text(a) + " and mask of shape " + shape_text(b) +
                    " do not broadcast together");
    }
    shape[shape.size() - 1 - i] = da == 1 ? db : da;
  }
  return shape;
}

// Copies the elements of `in` (dtype T, iterated over `shape`) whose mask is
// set into consecutive elements of the 1-D `out`; returns how many.
int64_t select_into(const Operand& out, int64_t out_stride, const Operand& in, const Operand& mask,
                    const std::vector<int64_t>& shape) {
  const size_t item = element_size(in.dtype);
  int64_t count = 0;
  char* next = out.base;
  auto take = [&](char* x, char* m) {
    if (*reinterpret_cast<const unsigned char*>(m) == 0) return;
    std::memcpy(next, x, item);
    next += out_stride;
    ++count;
  };
  // Bool and uint8 masks are one byte; the element size only matters for
  // stepping, which for_each_element takes from the operands' strides.
  switch (item) {
    case 1: for_each_element<1, 1>(shape, {&in, &mask}, take); break;
    case 2: for_each_element<2, 1>(shape, {&in, &mask}, take); break;
    case 4: for_each_element<4, 1>(shape, {&in, &mask}, take); break;
    default: for_each_element<8, 1>(shape, {&in, &mask}, take); break;
  }
  return count;
}

}  // namespace

}  // namespace aclsim::opapi

using namespace aclsim::opapi;

OPAPI_EXPORT aclnnStatus aclnnMaskedSelectGetWorkspaceSize(const aclTensor* self, const aclTensor* mask,
                                                           aclTensor* out, uint64_t* workspaceSize,
                                                           aclOpExecutor** executor) {
  return prepare("aclnnMaskedSelect", workspaceSize, executor, [&]() -> std::function<void()> {
    const TensorDesc& in = tensor_arg("self", self);
    const TensorDesc& m = tensor_arg("mask", mask);
    const TensorDesc& dst = tensor_arg("out", out);
    check_tensor("self", in);
    check_tensor("mask", m);
    check_tensor("out", dst);
    if (m.dtype != ACL_BOOL && m.dtype != ACL_UINT8) {
      throw_invalid("mask must be bool or uint8, not " + dtype_name(m.dtype));
    }
    if (dst.dtype != in.dtype) {
      throw_invalid("out has dtype " + dtype_name(dst.dtype) + ", self has dtype " + dtype_name(in.dtype));
    }
    const std::vector<int64_t> shape = broadcast_shape(in.shape, m.shape);
    const int64_t capacity = shape_numel(shape);
    if (dst.shape.size() != 1 || dst.shape[0] < capacity) {
      throw_invalid("out has shape " + shape_text(dst.shape) + ", needs one dimension of at least " +
                    std::to_string(capacity) + " elements (the broadcast shape is " + shape_text(shape) + ")");
    }
    if (overlaps(dst, in) || overlaps(dst, m)) throw_invalid("out overlaps self or mask");
    auto result = std::make_shared<ResultShape>();
    out->result_shape = result;
    return [in, m, dst, shape, result]() {
      int64_t count = 0;
      if (shape_numel(shape) > 0) {
        const int64_t stride = dst.strides[0] * static_cast<int64_t>(element_size(dst.dtype));
        count = select_into(make_operand(dst, dst.shape), stride, make_operand(in, shape),
                            make_operand(m, shape), shape);
      }
      const std::lock_guard<std::mutex> lock(result->mutex);
      result->shape = {count};
      result->known = true;
    };
  });
}
OPAPI_DEFINE_LAUNCH(aclnnMaskedSelect)
