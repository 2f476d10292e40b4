// Bitwise and, or, xor of integral and bool tensors. Each is a family of
// four, here for And:
//
//   x & y, bitwise_and(out=)   aclnnBitwiseAndTensor        (self, other, out)
//   x & 3                      aclnnBitwiseAndScalar        (self, scalar, out)
//   x &= y                     aclnnInplaceBitwiseAndTensor (selfRef, other)
//   x &= 3                     aclnnInplaceBitwiseAndScalar (selfRef, scalar)
//
// The common dtype is torch.result_type of the inputs and must be integral
// or bool (bool & bool is a logical and); floating operands are refused, as
// PyTorch refuses them.
#include "dtype.h"
#include "opapi.h"

namespace aclsim::opapi {

namespace {

aclnnStatus prepare_bitwise(const char* op, BitwiseOp kind, const aclTensor* self, const aclTensor* other,
                            const aclScalar* other_scalar, const aclTensor* out_tensor,
                            uint64_t* workspace_size, aclOpExecutor** executor) {
  return prepare(op, workspace_size, executor, [&]() -> std::function<void()> {
    const TensorDesc& out = tensor_arg("out", out_tensor);
    const TensorDesc& a = tensor_arg("self", self);
    check_tensor("out", out);
    check_tensor("self", a);
    check_broadcast("self", a, out.shape);
    const TypedArg ta{a.dtype, a.shape.empty() ? ArgKind::ZeroDimTensor : ArgKind::Tensor};
    Input b;
    TensorDesc b_desc;
    aclDataType common;
    if (other_scalar != nullptr) {
      b.is_scalar = true;
      b.scalar = scalar_arg("other", other_scalar);
      common = result_type({ta, {b.scalar.dtype, ArgKind::Number}});
    } else {
      b_desc = tensor_arg("other", other);
      check_tensor("other", b_desc);
      check_broadcast("other", b_desc, out.shape);
      common = result_type({ta, {b_desc.dtype, b_desc.shape.empty() ? ArgKind::ZeroDimTensor : ArgKind::Tensor}});
    }
    if (is_floating(common)) {
      throw_invalid("bitwise operations need integral or bool operands; the inputs promote to " +
                    dtype_name(common));
    }
    if (!can_cast(common, out.dtype)) {
      throw_invalid("result type " + dtype_name(common) + " can't be cast to the desired output type " +
                    dtype_name(out.dtype));
    }
    return [kind, out, a, b, b_desc, common]() {
      if (out.numel() == 0) return;
      std::vector<Materialized> keep;
      const Operand oa = input_operand(a, common, out, out.shape, keep);
      Input ib = b;
      if (!ib.is_scalar) ib.tensor = input_operand(b_desc, common, out, out.shape, keep);
      write_output(out, common, [&](const Operand& o) { bitwise_kernel(kind, o, oa, ib, out.shape); });
    };
  });
}

}  // namespace

}  // namespace aclsim::opapi

using namespace aclsim::opapi;

OPAPI_TENSOR_SCALAR_FAMILY(BitwiseAnd, prepare_bitwise, BitwiseOp::And)
OPAPI_TENSOR_SCALAR_FAMILY(BitwiseOr, prepare_bitwise, BitwiseOp::Or)
OPAPI_TENSOR_SCALAR_FAMILY(BitwiseXor, prepare_bitwise, BitwiseOp::Xor)
