// Copies and casts: aclnnInplaceCopy (copy_, clone, .contiguous(), x.to(dtype)
// on the device, the device-side legs of non-contiguous H2D/D2H copies) and
// aclnnCast (torch_npu's npu_dtype_cast, the non-blocking cast in copies).
//
// Both convert every element of the source, which may have any strides and
// broadcasts to the destination's shape, into the destination's dtype.
#include "dtype.h"
#include "opapi.h"

namespace aclsim::opapi {

namespace {

// dst[...] = convert(src[...]), reading src through a private copy when the
// two views partially overlap.
std::function<void()> copy_work(const TensorDesc& dst, const TensorDesc& src) {
  return [dst, src]() {
    if (dst.numel() == 0) return;
    if (same_view(dst, src)) return;  // copying a view onto itself
    std::vector<Materialized> keep;
    const Operand from = input_operand(src, src.dtype, dst, dst.shape, keep);
    cast_kernel(make_operand(dst, dst.shape), from, dst.shape);
  };
}

}  // namespace

}  // namespace aclsim::opapi

using namespace aclsim::opapi;

OPAPI_EXPORT aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor* selfRef, const aclTensor* src,
                                                          uint64_t* workspaceSize,
                                                          aclOpExecutor** executor) {
  const char* op = "aclnnInplaceCopy";
  return prepare(op, workspaceSize, executor, [&]() -> std::function<void()> {
    const TensorDesc& dst = tensor_arg("selfRef", selfRef);
    const TensorDesc& from = tensor_arg("src", src);
    check_tensor("selfRef", dst);
    check_tensor("src", from);
    check_broadcast("src", from, dst.shape);
    return copy_work(dst, from);
  });
}
OPAPI_DEFINE_LAUNCH(aclnnInplaceCopy)

OPAPI_EXPORT aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor* self, const aclDataType dtype,
                                                   aclTensor* out, uint64_t* workspaceSize,
                                                   aclOpExecutor** executor) {
  const char* op = "aclnnCast";
  return prepare(op, workspaceSize, executor, [&]() -> std::function<void()> {
    const TensorDesc& from = tensor_arg("self", self);
    const TensorDesc& dst = tensor_arg("out", out);
    check_tensor("self", from);
    require_supported("dtype", dtype);
    check_tensor("out", dst);
    if (dst.dtype != dtype) {
      throw_invalid("out has dtype " + dtype_name(dst.dtype) + " but dtype is " +
                    dtype_name(dtype));
    }
    check_broadcast("self", from, dst.shape);
    return copy_work(dst, from);
  });
}
OPAPI_DEFINE_LAUNCH(aclnnCast)
