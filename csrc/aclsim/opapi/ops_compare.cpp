// Equality: x == y (aclnnEqTensor), x == 2 (aclnnEqScalar) and their
// in-place forms eq_ (aclnnInplaceEqTensor, aclnnInplaceEqScalar), which
// store 1/0 in self's dtype.
//
// Both sides are converted to torch.result_type of the inputs and compared
// there; the output may have any supported dtype.
#include "dtype.h"
#include "opapi.h"

namespace aclsim::opapi {

namespace {

aclnnStatus prepare_eq(const char* op, const aclTensor* self, const aclTensor* other,
                       const aclScalar* other_scalar, const aclTensor* out_tensor,
                       uint64_t* workspace_size, aclOpExecutor** executor) {
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
      return [out, a, b, common]() {
        if (out.numel() == 0) return;
        std::vector<Materialized> keep;
        const Operand oa = input_operand(a, common, out, out.shape, keep);
        Input ib;
        ib.is_scalar = true;
        ib.scalar = b;
        eq_kernel(make_operand(out, out.shape), oa, ib, out.shape);
      };
    }
    const TensorDesc& b = tensor_arg("other", other);
    check_tensor("other", b);
    check_broadcast("other", b, out.shape);
    const ArgKind b_kind = b.shape.empty() ? ArgKind::ZeroDimTensor : ArgKind::Tensor;
    const aclDataType common = result_type({{a.dtype, a_kind}, {b.dtype, b_kind}});
    return [out, a, b, common]() {
      if (out.numel() == 0) return;
      std::vector<Materialized> keep;
      const Operand oa = input_operand(a, common, out, out.shape, keep);
      Input ib;
      ib.tensor = input_operand(b, common, out, out.shape, keep);
      eq_kernel(make_operand(out, out.shape), oa, ib, out.shape);
    };
  });
}

}  // namespace

}  // namespace aclsim::opapi

using namespace aclsim::opapi;

OPAPI_EXPORT aclnnStatus aclnnEqTensorGetWorkspaceSize(const aclTensor* self, const aclTensor* other,
                                                       aclTensor* out, uint64_t* workspaceSize,
                                                       aclOpExecutor** executor) {
  return prepare_eq("aclnnEqTensor", self, other, nullptr, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnEqTensor)

OPAPI_EXPORT aclnnStatus aclnnEqScalarGetWorkspaceSize(const aclTensor* self, const aclScalar* other,
                                                       aclTensor* out, uint64_t* workspaceSize,
                                                       aclOpExecutor** executor) {
  return prepare_eq("aclnnEqScalar", self, nullptr, other, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnEqScalar)

OPAPI_EXPORT aclnnStatus aclnnInplaceEqTensorGetWorkspaceSize(aclTensor* selfRef,
                                                              const aclTensor* other,
                                                              uint64_t* workspaceSize,
                                                              aclOpExecutor** executor) {
  return prepare_eq("aclnnInplaceEqTensor", selfRef, other, nullptr, selfRef, workspaceSize,
                    executor);
}
OPAPI_DEFINE_LAUNCH(aclnnInplaceEqTensor)

OPAPI_EXPORT aclnnStatus aclnnInplaceEqScalarGetWorkspaceSize(aclTensor* selfRef,
                                                              const aclScalar* other,
                                                              uint64_t* workspaceSize,
                                                              aclOpExecutor** executor) {
  return prepare_eq("aclnnInplaceEqScalar", selfRef, nullptr, other, selfRef, workspaceSize,
                    executor);
}
OPAPI_DEFINE_LAUNCH(aclnnInplaceEqScalar)
