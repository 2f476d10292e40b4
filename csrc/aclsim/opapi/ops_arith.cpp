// Elementwise arithmetic: the add, sub, mul and div families.
//
//   x + y, add(out=), add_   aclnnAdd / aclnnInplaceAdd    (tensor, tensor, alpha)
//   x + 2, add_(2)           aclnnAdds / aclnnInplaceAdds  (tensor, number, alpha)
//   2 + x                    aclnnAddV3                    (number, tensor, alpha)
//   sub: aclnnSub, aclnnSubs, aclnnInplaceSub, aclnnInplaceSubs
//   2 - x, torch.rsub        aclnnRsubs / aclnnRsub: other - alpha * self
//   mul: aclnnMul, aclnnMuls, aclnnInplaceMul, aclnnInplaceMuls
//   div: aclnnDiv, aclnnDivs, aclnnInplaceDiv, aclnnInplaceDivs (true division)
//
// The common dtype is torch.result_type of the inputs (float32 at least for
// division); the computation runs in its opmath type and the result is cast
// to the output's dtype. Inputs broadcast to the output's shape.
#include <cstring>

#include "dtype.h"
#include "opapi.h"

namespace aclsim::opapi {

namespace {

// One side of a binary op as passed by the caller: a tensor or a scalar.
struct Side {
  const char* name;
  const aclTensor* tensor;
  const aclScalar* scalar;
};

ScalarValue one() {
  ScalarValue s;
  s.dtype = ACL_INT64;
  const int64_t v = 1;
  std::memcpy(s.bytes.data(), &v, sizeof v);
  return s;
}

// A validated side, copied so it outlives the caller's objects.
struct Checked {
  bool is_scalar = false;
  TensorDesc tensor;
  ScalarValue scalar;
};

Checked check_side(const Side& side, const std::vector<int64_t>& shape) {
  Checked c;
  if (side.tensor == nullptr && side.scalar == nullptr) throw_nullptr(side.name);
  if (side.scalar != nullptr) {
    c.is_scalar = true;
    c.scalar = scalar_arg(side.name, side.scalar);
    return c;
  }
  c.tensor = tensor_arg(side.name, side.tensor);
  check_tensor(side.name, c.tensor);
  check_broadcast(side.name, c.tensor, shape);
  return c;
}

TypedArg typed(const Checked& c) {
  if (c.is_scalar) return {c.scalar.dtype, ArgKind::Number};
  return {c.tensor.dtype, c.tensor.shape.empty() ? ArgKind::ZeroDimTensor : ArgKind::Tensor};
}

aclnnStatus prepare_binary(const char* op, ArithOp kind, Side a, Side b, const aclScalar* alpha,
                           const aclTensor* out_tensor, uint64_t* workspace_size,
                           aclOpExecutor** executor) {
  return prepare(op, workspace_size, executor, [&]() -> std::function<void()> {
    const TensorDesc& out = tensor_arg("out", out_tensor);
    check_tensor("out", out);
    const Checked ca = check_side(a, out.shape);
    const Checked cb = check_side(b, out.shape);
    const ScalarValue alpha_value = alpha != nullptr ? scalar_arg("alpha", alpha) : one();
    aclDataType common = result_type({typed(ca), typed(cb)});
    if (kind == ArithOp::Div && !is_floating(common)) common = ACL_FLOAT;
    if (!can_cast(common, out.dtype)) {
      throw_invalid("result type " + dtype_name(common) + " can't be cast to the desired output type " +
                    dtype_name(out.dtype));
    }
    return [kind, out, ca, cb, alpha_value, common]() {
      if (out.numel() == 0) return;
      std::vector<Materialized> keep;
      auto resolve = [&](const Checked& c) {
        Input in;
        in.is_scalar = c.is_scalar;
        if (c.is_scalar) {
          in.scalar = c.scalar;
        } else {
          in.tensor = input_operand(c.tensor, common, out, out.shape, keep);
        }
        return in;
      };
      const Input ia = resolve(ca);
      const Input ib = resolve(cb);
      write_output(out, common, [&](const Operand& o) {
        arith_kernel(kind, o, ia, ib, alpha_value, out.shape);
      });
    };
  });
}

}  // namespace

}  // namespace aclsim::opapi

using namespace aclsim::opapi;

// ---------------------------------------------------------------- add / sub
#define OPAPI_ADD_FAMILY(Name, Kind)                                                            \
  OPAPI_EXPORT aclnnStatus aclnn##Name##GetWorkspaceSize(                                       \
      const aclTensor* self, const aclTensor* other, const aclScalar* alpha, aclTensor* out,    \
      uint64_t* workspaceSize, aclOpExecutor** executor) {                                      \
    return prepare_binary("aclnn" #Name, Kind, {"self", self, nullptr}, {"other", other, nullptr}, \
                          alpha, out, workspaceSize, executor);                                 \
  }                                                                                             \
  OPAPI_DEFINE_LAUNCH(aclnn##Name)                                                              \
  OPAPI_EXPORT aclnnStatus aclnn##Name##sGetWorkspaceSize(                                      \
      const aclTensor* self, const aclScalar* other, const aclScalar* alpha, aclTensor* out,    \
      uint64_t* workspaceSize, aclOpExecutor** executor) {                                      \
    return prepare_binary("aclnn" #Name "s", Kind, {"self", self, nullptr},                     \
                          {"other", nullptr, other}, alpha, out, workspaceSize, executor);      \
  }                                                                                             \
  OPAPI_DEFINE_LAUNCH(aclnn##Name##s)                                                           \
  OPAPI_EXPORT aclnnStatus aclnnInplace##Name##GetWorkspaceSize(                                \
      aclTensor* selfRef, const aclTensor* other, const aclScalar* alpha,                       \
      uint64_t* workspaceSize, aclOpExecutor** executor) {                                      \
    return prepare_binary("aclnnInplace" #Name, Kind, {"selfRef", selfRef, nullptr},            \
                          {"other", other, nullptr}, alpha, selfRef, workspaceSize, executor);  \
  }                                                                                             \
  OPAPI_DEFINE_LAUNCH(aclnnInplace##Name)                                                       \
  OPAPI_EXPORT aclnnStatus aclnnInplace##Name##sGetWorkspaceSize(                               \
      aclTensor* selfRef, const aclScalar* other, const aclScalar* alpha,                       \
      uint64_t* workspaceSize, aclOpExecutor** executor) {                                      \
    return prepare_binary("aclnnInplace" #Name "s", Kind, {"selfRef", selfRef, nullptr},        \
                          {"other", nullptr, other}, alpha, selfRef, workspaceSize, executor);  \
  }                                                                                             \
  OPAPI_DEFINE_LAUNCH(aclnnInplace##Name##s)

OPAPI_ADD_FAMILY(Add, ArithOp::Add)
OPAPI_ADD_FAMILY(Sub, ArithOp::Sub)

// 2 + x: the scalar is the left operand.
OPAPI_EXPORT aclnnStatus aclnnAddV3GetWorkspaceSize(const aclScalar* self, const aclTensor* other,
                                                    const aclScalar* alpha, aclTensor* out,
                                                    uint64_t* workspaceSize,
                                                    aclOpExecutor** executor) {
  return prepare_binary("aclnnAddV3", ArithOp::Add, {"self", nullptr, self},
                        {"other", other, nullptr}, alpha, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnAddV3)

// rsub(self, other, alpha) = other - alpha * self.
OPAPI_EXPORT aclnnStatus aclnnRsubGetWorkspaceSize(const aclTensor* self, const aclTensor* other,
                                                   const aclScalar* alpha, aclTensor* out,
                                                   uint64_t* workspaceSize,
                                                   aclOpExecutor** executor) {
  return prepare_binary("aclnnRsub", ArithOp::Sub, {"other", other, nullptr},
                        {"self", self, nullptr}, alpha, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnRsub)

OPAPI_EXPORT aclnnStatus aclnnRsubsGetWorkspaceSize(const aclTensor* self, const aclScalar* other,
                                                    const aclScalar* alpha, aclTensor* out,
                                                    uint64_t* workspaceSize,
                                                    aclOpExecutor** executor) {
  return prepare_binary("aclnnRsubs", ArithOp::Sub, {"other", nullptr, other},
                        {"self", self, nullptr}, alpha, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnRsubs)

// ---------------------------------------------------------------- mul / div
#define OPAPI_MUL_FAMILY(Name, Kind)                                                            \
  OPAPI_EXPORT aclnnStatus aclnn##Name##GetWorkspaceSize(                                       \
      const aclTensor* self, const aclTensor* other, aclTensor* out, uint64_t* workspaceSize,   \
      aclOpExecutor** executor) {                                                               \
    return prepare_binary("aclnn" #Name, Kind, {"self", self, nullptr}, {"other", other, nullptr}, \
                          nullptr, out, workspaceSize, executor);                               \
  }                                                                                             \
  OPAPI_DEFINE_LAUNCH(aclnn##Name)                                                              \
  OPAPI_EXPORT aclnnStatus aclnn##Name##sGetWorkspaceSize(                                      \
      const aclTensor* self, const aclScalar* other, aclTensor* out, uint64_t* workspaceSize,   \
      aclOpExecutor** executor) {                                                               \
    return prepare_binary("aclnn" #Name "s", Kind, {"self", self, nullptr},                     \
                          {"other", nullptr, other}, nullptr, out, workspaceSize, executor);    \
  }                                                                                             \
  OPAPI_DEFINE_LAUNCH(aclnn##Name##s)                                                           \
  OPAPI_EXPORT aclnnStatus aclnnInplace##Name##GetWorkspaceSize(                                \
      aclTensor* selfRef, const aclTensor* other, uint64_t* workspaceSize,                      \
      aclOpExecutor** executor) {                                                               \
    return prepare_binary("aclnnInplace" #Name, Kind, {"selfRef", selfRef, nullptr},            \
                          {"other", other, nullptr}, nullptr, selfRef, workspaceSize, executor); \
  }                                                                                             \
  OPAPI_DEFINE_LAUNCH(aclnnInplace##Name)                                                       \
  OPAPI_EXPORT aclnnStatus aclnnInplace##Name##sGetWorkspaceSize(                               \
      aclTensor* selfRef, const aclScalar* other, uint64_t* workspaceSize,                      \
      aclOpExecutor** executor) {                                                               \
    return prepare_binary("aclnnInplace" #Name "s", Kind, {"selfRef", selfRef, nullptr},        \
                          {"other", nullptr, other}, nullptr, selfRef, workspaceSize, executor); \
  }                                                                                             \
  OPAPI_DEFINE_LAUNCH(aclnnInplace##Name##s)

OPAPI_MUL_FAMILY(Mul, ArithOp::Mul)
OPAPI_MUL_FAMILY(Div, ArithOp::Div)
