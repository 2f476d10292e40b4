// Comparisons: x == y, x != y, x < y, x <= y, x > y, x >= y. Each comes as
// a family of four, here for Eq:
//
//   x == y, eq(out=)   aclnnEqTensor        (tensor, tensor, out)
//   x == 2             aclnnEqScalar        (tensor, scalar, out)
//   x.eq_(y)           aclnnInplaceEqTensor (selfRef, tensor)
//   x.eq_(2)           aclnnInplaceEqScalar (selfRef, scalar)
//
// and likewise for Ne, Lt, Le, Gt and Ge. Both sides are converted to
// torch.result_type of the inputs and compared there; the output may have
// any supported dtype (the in-place forms store 1/0 in self's dtype).
//
// Also here, comparisons of whole tensors:
//   torch.equal(x, y)             aclnnEqual   (self, other, out): one bool, true
//                                 when the shapes and all values are equal
//   torch.isclose / allclose      aclnnIsClose (self, other, rtol, atol,
//                                 equal_nan, out), computed in the common
//                                 floating dtype (float64 for integers)
#include <algorithm>
#include <string>
#include <vector>

#include "dtype.h"
#include "opapi.h"

namespace aclsim::opapi {

namespace {

aclnnStatus prepare_compare(const char* op, CompareOp kind, const aclTensor* self,
                            const aclTensor* other, const aclScalar* other_scalar,
                            const aclTensor* out_tensor, uint64_t* workspace_size,
                            aclOpExecutor** executor) {
  return prepare(op, workspace_size, executor, [&]() -> std::function<void()> {
    const TensorDesc& out = tensor_arg("out", out_tensor);
    const TensorDesc& a = tensor_arg("self", self);
    check_tensor("out", out);
    check_tensor("self", a);
    check_broadcast("self", a, out.shape);
    const ArgKind a_kind = a.shape.empty() ? ArgKind::ZeroDimTensor : ArgKind::Tensor;
    if (other_scalar != nullptr) {
      const ScalarValue b = scalar_arg("other", other_scalar);
      const aclDataType common = result_type({{a.dtype, a_kind}, {b.dtype, ArgKind::Number}});
      return [kind, out, a, b, common]() {
        if (out.numel() == 0) return;
        std::vector<Materialized> keep;
        const Operand oa = input_operand(a, common, out, out.shape, keep);
        Input ib;
        ib.is_scalar = true;
        ib.scalar = b;
        write_output(out, ACL_BOOL, [&](const Operand& o) { compare_kernel(kind, o, oa, ib, out.shape); });
      };
    }
    const TensorDesc& b = tensor_arg("other", other);
    check_tensor("other", b);
    check_broadcast("other", b, out.shape);
    const ArgKind b_kind = b.shape.empty() ? ArgKind::ZeroDimTensor : ArgKind::Tensor;
    const aclDataType common = result_type({{a.dtype, a_kind}, {b.dtype, b_kind}});
    return [kind, out, a, b, common]() {
      if (out.numel() == 0) return;
      std::vector<Materialized> keep;
      const Operand oa = input_operand(a, common, out, out.shape, keep);
      Input ib;
      ib.tensor = input_operand(b, common, out, out.shape, keep);
      write_output(out, ACL_BOOL, [&](const Operand& o) { compare_kernel(kind, o, oa, ib, out.shape); });
    };
  });
}

// The dtype both sides of a tensor-tensor comparison are converted to.
aclDataType common_dtype(const TensorDesc& a, const TensorDesc& b) {
  auto kind = [](const TensorDesc& t) { return t.shape.empty() ? ArgKind::ZeroDimTensor : ArgKind::Tensor; };
  return result_type({{a.dtype, kind(a)}, {b.dtype, kind(b)}});
}

aclnnStatus prepare_equal(const aclTensor* self, const aclTensor* other, const aclTensor* out_tensor,
                          uint64_t* workspace_size, aclOpExecutor** executor) {
  return prepare("aclnnEqual", workspace_size, executor, [&]() -> std::function<void()> {
    const TensorDesc& a = tensor_arg("self", self);
    const TensorDesc& b = tensor_arg("other", other);
    const TensorDesc& out = tensor_arg("out", out_tensor);
    check_tensor("self", a);
    check_tensor("other", b);
    check_tensor("out", out);
    if (out.numel() != 1) throw_invalid("out has shape " + shape_text(out.shape) + ", needs one element");
    const aclDataType common = common_dtype(a, b);
    return [a, b, out, common]() {
      bool equal = a.shape == b.shape;
      if (equal && a.numel() > 0) {
        const Materialized flags = allocate_contiguous(a.shape, ACL_BOOL);
        std::vector<Materialized> keep;
        const Operand oa = input_operand(a, common, flags.desc, a.shape, keep);
        Input ib;
        ib.tensor = input_operand(b, common, flags.desc, a.shape, keep);
        compare_kernel(CompareOp::Eq, make_operand(flags.desc, a.shape), oa, ib, a.shape);
        const auto* bytes = static_cast<const unsigned char*>(flags.desc.data);
        equal = std::all_of(bytes, bytes + a.numel(), [](unsigned char v) { return v != 0; });
      }
      Materialized result = allocate_contiguous(out.shape, ACL_BOOL);
      *static_cast<unsigned char*>(result.desc.data) = equal ? 1 : 0;
      cast_kernel(make_operand(out, out.shape), make_operand(result.desc, out.shape), out.shape);
    };
  });
}

aclnnStatus prepare_isclose(const aclTensor* self, const aclTensor* other, double rtol, double atol, bool equal_nan,
                            const aclTensor* out_tensor, uint64_t* workspace_size, aclOpExecutor** executor) {
  return prepare("aclnnIsClose", workspace_size, executor, [&]() -> std::function<void()> {
    const TensorDesc& a = tensor_arg("self", self);
    const TensorDesc& b = tensor_arg("other", other);
    const TensorDesc& out = tensor_arg("out", out_tensor);
    check_tensor("self", a);
    check_tensor("other", b);
    check_tensor("out", out);
    check_broadcast("self", a, out.shape);
    check_broadcast("other", b, out.shape);
    if (!(rtol >= 0) || !(atol >= 0)) {
      throw_invalid("rtol and atol must be non-negative, got rtol=" + std::to_string(rtol) +
                    " atol=" + std::to_string(atol));
    }
    const aclDataType common = common_dtype(a, b);
    const aclDataType compute = is_floating(common) ? common : ACL_DOUBLE;
    return [a, b, out, compute, rtol, atol, equal_nan]() {
      if (out.numel() == 0) return;
      std::vector<Materialized> keep;
      const Operand oa = input_operand(a, compute, out, out.shape, keep);
      const Operand ob = input_operand(b, compute, out, out.shape, keep);
      write_output(out, ACL_BOOL,
                   [&](const Operand& o) { isclose_kernel(o, oa, ob, rtol, atol, equal_nan, out.shape); });
    };
  });
}

}  // namespace

}  // namespace aclsim::opapi

using namespace aclsim::opapi;

OPAPI_TENSOR_SCALAR_FAMILY(Eq, prepare_compare, CompareOp::Eq)
OPAPI_TENSOR_SCALAR_FAMILY(Ne, prepare_compare, CompareOp::Ne)
OPAPI_TENSOR_SCALAR_FAMILY(Lt, prepare_compare, CompareOp::Lt)
OPAPI_TENSOR_SCALAR_FAMILY(Le, prepare_compare, CompareOp::Le)
OPAPI_TENSOR_SCALAR_FAMILY(Gt, prepare_compare, CompareOp::Gt)
OPAPI_TENSOR_SCALAR_FAMILY(Ge, prepare_compare, CompareOp::Ge)

OPAPI_EXPORT aclnnStatus aclnnEqualGetWorkspaceSize(const aclTensor* self, const aclTensor* other, aclTensor* out,
                                                    uint64_t* workspaceSize, aclOpExecutor** executor) {
  return prepare_equal(self, other, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnEqual)

OPAPI_EXPORT aclnnStatus aclnnIsCloseGetWorkspaceSize(const aclTensor* self, const aclTensor* other, double rtol,
                                                      double atol, bool equalNan, aclTensor* out,
                                                      uint64_t* workspaceSize, aclOpExecutor** executor) {
  return prepare_isclose(self, other, rtol, atol, equalNan, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnIsClose)
