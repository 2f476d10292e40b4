// Reductions over some or all dimensions (empty `dims` reduce every one):
//
//   Tensor.sum(dim, keepdim, dtype)    aclnnReduceSum (self, dims, keepdim, dtype, out)
//   Tensor.mean(dim, keepdim, dtype)   aclnnMean      (self, dims, keepdim, dtype, out)
//   Tensor.all(dim, keepdim)           aclnnAll       (self, dims, keepdim, out)
//   Tensor.any(dim, keepdim)           aclnnAny       (self, dims, keepdim, out)
//   Tensor.max(), Tensor.min()         aclnnMax, aclnnMin (self, out): every element
//
// Sum and mean run in float64 for floating inputs and sum in int64 otherwise
// (bool counts ones), over a contiguous copy of the input, and are cast to
// `out`'s dtype at the end: at least as exact as PyTorch's CPU kernel, which
// accumulates float32 in float32. A reduced dimension of size 0 sums to 0;
// its mean is NaN. Mean needs a floating `out`, as PyTorch. All and any
// test "!= 0" (NaN is true) and write bool, or uint8 for a uint8 self.
//
// Max and min reduce every element into a 0-dim `out` of self's dtype; a
// NaN anywhere gives NaN, as in PyTorch. An empty self is refused (PyTorch
// asks for a dim then).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
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

// acc[j] = f(acc[j], src[i]) for every element i of the contiguous `src`
// (shape `shape`), j being i's index with the reduced dimensions dropped.
template <class T, class F>
void fold_into(const T* src, T* acc, const std::vector<int64_t>& shape, const std::vector<bool>& reduced, F f) {
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
    acc[j] = f(acc[j], src[i]);
    for (size_t d = rank; d-- > 0;) {  // odometer over the input's shape
      j += acc_step[d];
      if (++index[d] < shape[d]) break;
      j -= acc_step[d] * shape[d];
      index[d] = 0;
    }
  }
}

enum class Reduction { Sum, Mean, All, Any };

// The dtype a reduction accumulates in: float64 / int64 for sum and mean,
// bool for all and any (the input is first turned into "!= 0").
aclDataType accumulator_dtype(Reduction kind, aclDataType in) {
  if (kind == Reduction::All || kind == Reduction::Any) return ACL_BOOL;
  return is_floating(in) ? ACL_DOUBLE : ACL_INT64;
}

// Runs the reduction of the contiguous accumulator-dtype `src` into `acc`
// (zeroed, shape of out), then finishes a mean by dividing by `count`.
void reduce_into(Reduction kind, const Materialized& src, Materialized& acc, const std::vector<int64_t>& shape,
                 const std::vector<bool>& reduced, int64_t count) {
  auto* a = acc.desc.data;
  const auto* s = src.desc.data;
  const int64_t n = shape_numel(acc.desc.shape);
  switch (kind) {
    case Reduction::Sum:
    case Reduction::Mean:
      if (acc.desc.dtype == ACL_DOUBLE) {
        auto* d = static_cast<double*>(a);
        fold_into(static_cast<const double*>(s), d, shape, reduced, [](double x, double y) { return x + y; });
        if (kind == Reduction::Mean) {
          for (int64_t i = 0; i < n; ++i) d[i] /= static_cast<double>(count);  // 0/0 is NaN
        }
      } else {
        fold_into(static_cast<const int64_t*>(s), static_cast<int64_t*>(a), shape, reduced,
                  [](int64_t x, int64_t y) { return static_cast<int64_t>(static_cast<uint64_t>(x) + y); });
      }
      return;
    case Reduction::All:
      std::fill_n(static_cast<uint8_t*>(a), n, uint8_t{1});
      fold_into(static_cast<const uint8_t*>(s), static_cast<uint8_t*>(a), shape, reduced,
                [](uint8_t x, uint8_t y) { return static_cast<uint8_t>(x & y); });
      return;
    case Reduction::Any:
      fold_into(static_cast<const uint8_t*>(s), static_cast<uint8_t*>(a), shape, reduced,
                [](uint8_t x, uint8_t y) { return static_cast<uint8_t>(x | y); });
      return;
  }
}

// `dtype` is the caller's dtype argument (sum, mean) or nullopt (all, any).
aclnnStatus prepare_reduce(const char* op, Reduction kind, const aclTensor* self, const aclIntArray* dims,
                           bool keep_dims, std::optional<aclDataType> dtype, aclTensor* out_tensor,
                           uint64_t* workspace_size, aclOpExecutor** executor) {
  return prepare(op, workspace_size, executor, [&]() -> std::function<void()> {
    const TensorDesc& in = tensor_arg("self", self);
    const TensorDesc& out = tensor_arg("out", out_tensor);
    check_tensor("self", in);
    check_tensor("out", out);
    if (dtype.has_value() && *dtype != out.dtype) {
      throw_invalid("dtype " + dtype_name(*dtype) + " differs from out's dtype " + dtype_name(out.dtype));
    }
    if (kind == Reduction::Mean && !is_floating(out.dtype)) {
      throw_invalid("mean needs a floating output dtype, got " + dtype_name(out.dtype) +
                    "; pass a floating dtype or convert self first");
    }
    if ((kind == Reduction::All || kind == Reduction::Any) && out.dtype != ACL_BOOL && out.dtype != ACL_UINT8) {
      throw_invalid("out must be bool or uint8, not " + dtype_name(out.dtype));
    }
    const std::vector<bool> reduced = reduced_dims(dims, static_cast<int64_t>(in.shape.size()));
    const std::vector<int64_t> expect = reduced_shape(in.shape, reduced, keep_dims);
    if (out.shape != expect) {
      throw_invalid("out has shape " + shape_text(out.shape) + ", the reduction of self " + shape_text(in.shape) +
                    " has shape " + shape_text(expect));
    }
    if (overlaps(in, out)) throw_invalid("out overlaps self");
    int64_t count = 1;
    for (size_t i = 0; i < in.shape.size(); ++i) {
      if (reduced[i]) count *= in.shape[i];
    }
    const aclDataType acc_dtype = accumulator_dtype(kind, kind == Reduction::Mean ? out.dtype : in.dtype);
    return [kind, in, out, reduced, acc_dtype, count]() {
      if (out.numel() == 0) return;
      Materialized acc = allocate_contiguous(out.shape, acc_dtype);  // zeroed
      const Materialized src = materialize(in, acc_dtype);
      reduce_into(kind, src, acc, in.shape, reduced, count);
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
  return prepare_reduce("aclnnReduceSum", Reduction::Sum, self, dims, keepDims, dtype, out, workspaceSize,
                        executor);
}
OPAPI_DEFINE_LAUNCH(aclnnReduceSum)

OPAPI_EXPORT aclnnStatus aclnnMeanGetWorkspaceSize(const aclTensor* self, const aclIntArray* dim, bool keepdim,
                                                   aclDataType dtype, aclTensor* out, uint64_t* workspaceSize,
                                                   aclOpExecutor** executor) {
  return prepare_reduce("aclnnMean", Reduction::Mean, self, dim, keepdim, dtype, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnMean)

OPAPI_EXPORT aclnnStatus aclnnAllGetWorkspaceSize(const aclTensor* self, const aclIntArray* dim, bool keepdim,
                                                  aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return prepare_reduce("aclnnAll", Reduction::All, self, dim, keepdim, std::nullopt, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnAll)

OPAPI_EXPORT aclnnStatus aclnnAnyGetWorkspaceSize(const aclTensor* self, const aclIntArray* dim, bool keepdim,
                                                  aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return prepare_reduce("aclnnAny", Reduction::Any, self, dim, keepdim, std::nullopt, out, workspaceSize, executor);
}
OPAPI_DEFINE_LAUNCH(aclnnAny)

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
