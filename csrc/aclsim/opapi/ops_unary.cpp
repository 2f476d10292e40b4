// Elementwise functions of one tensor:
//
//   x.abs(), abs(out=), abs_()     aclnnAbs       (self, out)
//   -x, x.neg(), neg_()            aclnnNeg       (self, out)
//   x.ceil(), ceil(out=)           aclnnCeil      (self, out)
//   x.ceil_()                      aclnnInplaceCeil (selfRef)
//   torch.isfinite(x)              aclnnIsFinite  (self, out), out bool
//
// Abs and Ceil compute in self's dtype and cast to out's; torch_npu passes
// the same tensor as self and out for abs_() and neg_(). Abs and Neg of bool
// are refused, as PyTorch refuses them.
#include <string>

#include "dtype.h"
#include "opapi.h"

namespace aclsim::opapi {

namespace {

// What an operator of this file computes.
enum class Function { Abs, Neg, Ceil, IsFinite };

aclnnStatus prepare_unary(const char* op, Function fn, const aclTensor* self, const aclTensor* out_tensor,
                          uint64_t* workspace_size, aclOpExecutor** executor) {
  return prepare(op, workspace_size, executor, [&]() -> std::function<void()> {
    const TensorDesc& in = tensor_arg("self", self);
    const TensorDesc& out = tensor_arg("out", out_tensor);
    check_tensor("self", in);
    check_tensor("out", out);
    if (in.shape != out.shape) {
      throw_invalid("out has shape " + shape_text(out.shape) + ", self has shape " + shape_text(in.shape));
    }
    if ((fn == Function::Abs || fn == Function::Neg) && in.dtype == ACL_BOOL) {
      throw_invalid(std::string("self: ") + (fn == Function::Abs ? "abs" : "negation") +
                    " of a bool tensor is not supported");
    }
    const aclDataType result = fn == Function::IsFinite ? ACL_BOOL : in.dtype;
    if (!can_cast(result, out.dtype)) {
      throw_invalid("result type " + dtype_name(result) + " can't be cast to the desired output type " +
                    dtype_name(out.dtype));
    }
    return [fn, in, out, result]() {
      if (out.numel() == 0) return;
      std::vector<Materialized> keep;
      const Operand a = input_operand(in, in.dtype, out, out.shape, keep);
      write_output(out, result, [&](const Operand& o) {
        if (fn == Function::IsFinite) {
          isfinite_kernel(o, a, out.shape);
        } else {
          const UnaryOp u = fn == Function::Abs ? UnaryOp::Abs : fn == Function::Neg ? UnaryOp::Neg : UnaryOp::Ceil;
          unary_kernel(u, o, a, out.shape);
        }
      });
    };
  });
}

}  // namespace

}  // namespace aclsim::opapi

using namespace aclsim::opapi;

OPAPI_EXPORT aclnnStatus aclnnAbsGetWorkspaceSize(const aclTensor* self, aclTensor* out, uint64_t* workspaceSize,
                                                  aclOpExecutor** executor) {
  return prepare_unary("aclnnAbs", Function::Abs, self, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnAbs)

OPAPI_EXPORT aclnnStatus aclnnNegGetWorkspaceSize(const aclTensor* self, aclTensor* out, uint64_t* workspaceSize,
                                                  aclOpExecutor** executor) {
  return prepare_unary("aclnnNeg", Function::Neg, self, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnNeg)

OPAPI_EXPORT aclnnStatus aclnnCeilGetWorkspaceSize(const aclTensor* self, aclTensor* out, uint64_t* workspaceSize,
                                                   aclOpExecutor** executor) {
  return prepare_unary("aclnnCeil", Function::Ceil, self, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnCeil)

OPAPI_EXPORT aclnnStatus aclnnInplaceCeilGetWorkspaceSize(aclTensor* selfRef, uint64_t* workspaceSize,
                                                          aclOpExecutor** executor) {
  return prepare_unary("aclnnInplaceCeil", Function::Ceil, selfRef, selfRef, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnInplaceCeil)

OPAPI_EXPORT aclnnStatus aclnnIsFiniteGetWorkspaceSize(const aclTensor* self, aclTensor* out,
                                                       uint64_t* workspaceSize, aclOpExecutor** executor) {
  return prepare_unary("aclnnIsFinite", Function::IsFinite, self, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnIsFinite)
