// aclnnArange: torch.arange(start, end, step) on the device. torch_npu has
// already sized `out` (1-D, ceil((end - start) / step) elements); element i
// is start + i * step in PyTorch's accumulation type for out's dtype.
#include <cmath>

#include "dtype.h"
#include "opapi.h"

using namespace aclsim::opapi;

OPAPI_EXPORT aclnnStatus aclnnArangeGetWorkspaceSize(const aclScalar* start, const aclScalar* end,
                                                     const aclScalar* step, aclTensor* out,
                                                     uint64_t* workspaceSize,
                                                     aclOpExecutor** executor) {
  const char* op = "aclnnArange";
  return prepare(op, workspaceSize, executor, [&]() -> std::function<void()> {
    const ScalarValue first = scalar_arg("start", start);
    const ScalarValue last = scalar_arg("end", end);
    const ScalarValue delta = scalar_arg("step", step);
    const TensorDesc& dst = tensor_arg("out", out);
    check_tensor("out", dst);
    if (dst.dtype == ACL_BOOL) throw_invalid("out has unsupported dtype bool");
    if (dst.shape.size() != 1) {
      throw_invalid("out must be 1-D, got " + std::to_string(dst.shape.size()) + " dims");
    }
    double step_value = 0;
    double start_value = 0;
    double end_value = 0;
    convert_scalar(delta, ACL_DOUBLE, &step_value);
    convert_scalar(first, ACL_DOUBLE, &start_value);
    convert_scalar(last, ACL_DOUBLE, &end_value);
    if (step_value == 0 || std::isnan(step_value)) throw_invalid("step must be nonzero");
    if (!std::isfinite(start_value) || !std::isfinite(end_value)) {
      throw_invalid("unsupported range: start and end must be finite");
    }
    return [dst, first, delta]() {
      const int64_t n = dst.shape[0];
      if (n > 0) arange_kernel(make_operand(dst, dst.shape), n, first, delta);
    };
  });
}
OPAPI_DEFINE_LAUNCH(aclnnArange)
