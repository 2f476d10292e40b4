// Fill operators: aclnnInplaceZero (torch.zeros, zero_), aclnnInplaceOne
// (torch.ones, ones_like, one_), aclnnInplaceFillScalar (fill_(number),
// torch.full) and aclnnInplaceFillTensor (fill_(device 0-dim tensor)).
#include <cstring>

#include "opapi.h"

namespace aclsim::opapi {

namespace {

ScalarValue int64_scalar(int64_t v) {
  ScalarValue s;
  s.dtype = ACL_INT64;
  std::memcpy(s.bytes.data(), &v, sizeof v);
  return s;
}

aclnnStatus prepare_fill(const char* op, aclTensor* self, ScalarValue value,
                         uint64_t* workspace_size, aclOpExecutor** executor) {
  return prepare(op, workspace_size, executor, [&]() -> std::function<void()> {
    const TensorDesc& out = tensor_arg("selfRef", self);
    check_tensor("selfRef", out);
    return [out, value]() {
      if (out.numel() > 0) fill_kernel(make_operand(out, out.shape), out.shape, value);
    };
  });
}

}  // namespace

}  // namespace aclsim::opapi

using namespace aclsim::opapi;

OPAPI_EXPORT aclnnStatus aclnnInplaceZeroGetWorkspaceSize(aclTensor* selfRef, uint64_t* workspaceSize,
                                                          aclOpExecutor** executor) {
  return prepare_fill("aclnnInplaceZero", selfRef, int64_scalar(0), workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnInplaceZero)

OPAPI_EXPORT aclnnStatus aclnnInplaceOneGetWorkspaceSize(aclTensor* selfRef, uint64_t* workspaceSize,
                                                         aclOpExecutor** executor) {
  return prepare_fill("aclnnInplaceOne", selfRef, int64_scalar(1), workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnInplaceOne)

OPAPI_EXPORT aclnnStatus aclnnInplaceFillScalarGetWorkspaceSize(aclTensor* selfRef,
                                                                const aclScalar* value,
                                                                uint64_t* workspaceSize,
                                                                aclOpExecutor** executor) {
  const char* op = "aclnnInplaceFillScalar";
  return prepare(op, workspaceSize, executor, [&]() -> std::function<void()> {
    const TensorDesc& out = tensor_arg("selfRef", selfRef);
    check_tensor("selfRef", out);
    const ScalarValue v = scalar_arg("value", value);
    return [out, v]() {
      if (out.numel() > 0) fill_kernel(make_operand(out, out.shape), out.shape, v);
    };
  });
}
OPAPI_DEFINE_LAUNCH(aclnnInplaceFillScalar)

OPAPI_EXPORT aclnnStatus aclnnInplaceFillTensorGetWorkspaceSize(aclTensor* selfRef,
                                                                const aclTensor* value,
                                                                uint64_t* workspaceSize,
                                                                aclOpExecutor** executor) {
  const char* op = "aclnnInplaceFillTensor";
  return prepare(op, workspaceSize, executor, [&]() -> std::function<void()> {
    const TensorDesc& out = tensor_arg("selfRef", selfRef);
    const TensorDesc& v = tensor_arg("value", value);
    check_tensor("selfRef", out);
    check_tensor("value", v);
    if (v.numel() != 1) {
      throw_invalid("value must hold exactly one element, got " + std::to_string(v.numel()));
    }
    return [out, v]() {
      // Read the value when the stream reaches this op: earlier work on the
      // stream may have produced it.
      if (out.numel() == 0) return;
      const std::vector<int64_t> one(out.shape.size(), 1);
      TensorDesc element = v;
      element.shape = one;
      element.strides = one;
      cast_kernel(make_operand(out, out.shape), make_operand(element, out.shape), out.shape);
    };
  });
}
OPAPI_DEFINE_LAUNCH(aclnnInplaceFillTensor)
