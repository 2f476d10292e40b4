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

}  // namespace

}  // namespace aclsim::opapi

using namespace aclsim::opapi;

OPAPI_TENSOR_SCALAR_FAMILY(Eq, prepare_compare, CompareOp::Eq)
OPAPI_TENSOR_SCALAR_FAMILY(Ne, prepare_compare, CompareOp::Ne)
OPAPI_TENSOR_SCALAR_FAMILY(Lt, prepare_compare, CompareOp::Lt)
OPAPI_TENSOR_SCALAR_FAMILY(Le, prepare_compare, CompareOp::Le)
OPAPI_TENSOR_SCALAR_FAMILY(Gt, prepare_compare, CompareOp::Gt)
OPAPI_TENSOR_SCALAR_FAMILY(Ge, prepare_compare, CompareOp::Ge)
