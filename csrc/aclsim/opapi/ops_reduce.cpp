// Reductions: aclnnReduceSum (torch.sum, Tensor.sum(dim, keepdim, dtype)),
// aclnnMax and aclnnMin (Tensor.max(), Tensor.min() without a dim).
//
// The sum runs in float64 for floating inputs and in int64 otherwise (bool
// counts ones), over a contiguous copy of the input, and is cast to `out`'s
// dtype at the end: at least as exact as PyTorch's CPU kernel, which
// accumulates float32 in float32. Empty `dims` reduce every dimension; a
// reduced dimension of size 0 sums to 0.
//
// Max and min reduce every element into a 0-dim `out` of self's dtype; a
// NaN anywhere gives NaN, as in PyTorch. An empty self is refused (PyTorch
// asks for a dim then).
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "opapi.h"

namespace aclsim::opapi {

namespace {

// Which dimensions of a rank-`rank` tensor `dims` names; empty means all.
// As PyTorch, a 0-dim tensor accepts dimension 0 or -1.
std::vector<bool> reduced_dims(const aclIntArray* dims, int64_t rank) {
  if (dims == nullptr) throw_invalid("dims must not be null");
  std::vector<bool> reduced(static_cast<size_t>(rank), dims->values.empty());
  const int64_t bound = rank == 0 ? 1 : rank;
  for (int64_t d : dims->values) {
    const int64_t wrapped = d < 0 ? d + bound : d;
    if (wrapped < 0 || wrapped >= bound) {
      throw_invalid("dims: dimension " + std::to_string(d) + " is out of range for a tensor of rank " +
                    std::to_string(rank));
    }
    if (rank > 0) reduced[static_cast<size_t>(wrapped)] = true;
  }
  return reduced;
}

std::vector<int64_t> reduced_shape(const std::vector<int64_t>& shape, const std::vector<bool>& reduced,
                                   bool keep_dims) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!reduced[i]) {
      out.push_back(shape[i]);
    } else if (keep_dims) {
      out.push_back(1);
    }
  }
  return out;
}

// acc[j] += src[i] for every element i of the contiguous `src` (shape
// `shape`), j being i's index with the reduced dimensions dropped.
template <class T>
void sum_into(const T* src, T* acc, const std::vector<int64_t>& shape, const std::vector<bool>& reduced) {
  const size_t rank = shape.size();
  // The step of each input dimension in the (contiguous) accumulator.
  std::vector<int64_t> acc_step(rank, 0);
  int64_t step = 1;
  for (size_t i = rank; i-- > 0;) {
    if (!reduced[i]) {
      acc_step[i] = step;
      step *= shape[i];
    }
  }
  std::vector<int64_t> index(rank, 0);
  const int64_t n = shape_numel(shape);
  int64_t j = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc[j] += src[i];
    for (size_t d = rank; d-- > 0;) {  // odometer over the input's shape
      j += acc_step[d];
      if (++index[d] < shape[d]) break;
      j -= acc_step[d] * shape[d];
      index[d] = 0;
    }
  }
}

aclnnStatus prepare_reduce_sum(const aclTensor* self, const aclIntArray* dims, bool keep_dims, aclDataType dtype,
                               aclTensor* out_tensor, uint64_t* workspace_size, aclOpExecutor** executor) {
  return prepare("aclnnReduceSum", workspace_size, executor, [&]() -> std::function<void()> {
    const TensorDesc& in = tensor_arg("self", self);
    const TensorDesc& out = tensor_arg("out", out_tensor);
    check_tensor("self", in);
    check_tensor("out", out);
    if (dtype != out.dtype) {
      throw_invalid("dtype " + std::to_string(static_cast<int>(dtype)) + " differs from out's dtype " +
                    std::to_string(static_cast<int>(out.dtype)));
    }
    const std::vector<bool> reduced = reduced_dims(dims, static_cast<int64_t>(in.shape.size()));
    const std::vector<int64_t> expect = reduced_shape(in.shape, reduced, keep_dims);
    if (out.shape != expect) {
      throw_invalid("out has shape " + shape_text(out.shape) + ", the sum of self " + shape_text(in.shape) +
                    " has shape " + shape_text(expect));
    }
    if (overlaps(in, out)) throw_invalid("out overlaps self");
    const aclDataType acc_dtype = is_floating(in.dtype) ? ACL_DOUBLE : ACL_INT64;
    return [in, out, reduced, acc_dtype]() {
      if (out.numel() == 0) return;
      Materialized acc = allocate_contiguous(out.shape, acc_dtype);  // zeroed
      if (in.numel() > 0) {
        const Materialized src = materialize(in, acc_dtype);
        if (acc_dtype == ACL_DOUBLE) {
          sum_into(reinterpret_cast<const double*>(src.desc.data), reinterpret_cast<double*>(acc.desc.data),
                   in.shape, reduced);
        } else {
          sum_into(reinterpret_cast<const int64_t*>(src.desc.data), reinterpret_cast<int64_t*>(acc.desc.data),
                   in.shape, reduced);
        }
      }
      cast_kernel(make_operand(out, out.shape), make_operand(acc.desc, out.shape), out.shape);
    };
  });
}

// The largest (or smallest) element of the contiguous `src`, NaN if any is.
template <class T>
void extreme_into(const T* src, int64_t n, bool largest, T* result) {
  T best = src[0];
  for (int64_t i = 0; i < n; ++i) {
    const T v = src[i];
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(v)) {
        *result = v;
        return;
      }
    }
    if (largest ? best < v : v < best) best = v;
  }
  *result = best;
}

aclnnStatus prepare_extreme(const char* op, bool largest, const aclTensor* self, aclTensor* out_tensor,
                            uint64_t* workspace_size, aclOpExecutor** executor) {
  return prepare(op, workspace_size, executor, [&]() -> std::function<void()> {
    const TensorDesc& in = tensor_arg("self", self);
    const TensorDesc& out = tensor_arg("out", out_tensor);
    check_tensor("self", in);
    check_tensor("out", out);
    if (in.numel() == 0) throw_invalid("self is empty: there is no element to reduce");
    if (out.numel() != 1) throw_invalid("out has shape " + shape_text(out.shape) + ", needs one element");
    if (out.dtype != in.dtype) {
      throw_invalid("out has dtype " + dtype_name(out.dtype) + ", self has dtype " + dtype_name(in.dtype));
    }
    return [largest, in, out]() {
      // Compare natural values: float16/bfloat16 as float, bool as 0/1.
      const aclDataType wide = is_floating(in.dtype) ? ACL_DOUBLE : ACL_INT64;
      const Materialized src = materialize(in, wide);
      Materialized result = allocate_contiguous({}, wide);
      if (wide == ACL_DOUBLE) {
        extreme_into(reinterpret_cast<const double*>(src.desc.data), in.numel(), largest,
                     reinterpret_cast<double*>(result.desc.data));
      } else {
        extreme_into(reinterpret_cast<const int64_t*>(src.desc.data), in.numel(), largest,
                     reinterpret_cast<int64_t*>(result.desc.data));
      }
      cast_kernel(make_operand(out, out.shape), make_operand(result.desc, out.shape), out.shape);
    };
  });
}

}  // namespace

}  // namespace aclsim::opapi

using namespace aclsim::opapi;

OPAPI_EXPORT aclnnStatus aclnnReduceSumGetWorkspaceSize(const aclTensor* self, const aclIntArray* dims,
                                                        bool keepDims, aclDataType dtype, aclTensor* out,
                                                        uint64_t* workspaceSize, aclOpExecutor** executor) {
  return prepare_reduce_sum(self, dims, keepDims, dtype, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnReduceSum)

OPAPI_EXPORT aclnnStatus aclnnMaxGetWorkspaceSize(const aclTensor* self, aclTensor* out, uint64_t* workspaceSize,
                                                  aclOpExecutor** executor) {
  return prepare_extreme("aclnnMax", true, self, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnMax)

OPAPI_EXPORT aclnnStatus aclnnMinGetWorkspaceSize(const aclTensor* self, aclTensor* out, uint64_t* workspaceSize,
                                                  aclOpExecutor** executor) {
  return prepare_extreme("aclnnMin", false, self, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnMin)
