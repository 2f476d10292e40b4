// Dtype-generic, strided, broadcasting CPU kernels behind the aclnn ops.
//
// Kernels run on a stream worker thread and never validate: the operator's
// first phase has already checked dtypes, shapes and pointers. Operands are
// resolved for an iteration shape (see strided.h); tensor inputs of the
// arithmetic kernels must already have the compute dtype.
#pragma once

#include <acl/acl.h>

#include <cstdint>
#include <vector>

#include "strided.h"
#include "tensor.h"

namespace aclsim::opapi {

// A host-side contiguous copy of a view, described like a device tensor.
struct Materialized {
  std::vector<unsigned char> storage;
  TensorDesc desc;
};

// A new zeroed, contiguous host buffer of `shape` elements of `dtype`.
Materialized allocate_contiguous(const std::vector<int64_t>& shape, aclDataType dtype);

// Copies the view `t` into a new contiguous buffer of dtype `dtype`.
Materialized materialize(const TensorDesc& t, aclDataType dtype);

// Converts the single value `in` to dtype `to`, writing element_size(to)
// bytes at `out`.
void convert_scalar(const ScalarValue& in, aclDataType to, void* out);

// dst[i] = convert(src[i]) over `shape` (src may broadcast).
void cast_kernel(const Operand& dst, const Operand& src, const std::vector<int64_t>& shape);

// dst[i] = value (converted to dst's dtype once).
void fill_kernel(const Operand& dst, const std::vector<int64_t>& shape, const ScalarValue& value);

enum class ArithOp { Add, Sub, Mul, Div };

// One input of a binary kernel: a tensor operand or a host scalar.
struct Input {
  bool is_scalar = false;
  Operand tensor;
  ScalarValue scalar;
};

// out = a OP b (Add/Sub: a +- alpha * b), computed in the opmath type of
// out.dtype. Tensor inputs must have out.dtype; scalars are converted
// straight to the opmath type, as PyTorch does for Python numbers.
void arith_kernel(ArithOp op, const Operand& out, const Input& a, const Input& b,
                  const ScalarValue& alpha, const std::vector<int64_t>& shape);

enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge };

// out = (a OP b) for a tensor `a` of the compute dtype and `b` of the same
// dtype (a scalar `b` is first converted to that dtype). `out` is bool.
// Comparisons with NaN are false, except Ne, which is true.
void compare_kernel(CompareOp op, const Operand& out, const Operand& a, const Input& b,
                    const std::vector<int64_t>& shape);

enum class UnaryOp { Abs, Neg, Ceil };

// out = OP(a), `out` and `a` of the same dtype. Abs and Neg wrap for the
// most negative integer (as PyTorch's CPU kernels); Ceil leaves integers as
// they are.
void unary_kernel(UnaryOp op, const Operand& out, const Operand& a, const std::vector<int64_t>& shape);

// out = |a - b| <= atol + rtol * |b| (or a == b) for `a` and `b` of the same
// floating dtype, computed in its opmath type; NaNs are close to each other
// only when `equal_nan`. `out` is bool.
void isclose_kernel(const Operand& out, const Operand& a, const Operand& b, double rtol, double atol,
                    bool equal_nan, const std::vector<int64_t>& shape);

// out = isfinite(a) for `a` of any dtype (integers and bools are finite);
// `out` is bool.
void isfinite_kernel(const Operand& out, const Operand& a, const std::vector<int64_t>& shape);

enum class BitwiseOp { And, Or, Xor };

// out = a OP b on the bits of integral or bool values: tensor inputs have
// out.dtype, a scalar is first converted to it.
void bitwise_kernel(BitwiseOp op, const Operand& out, const Operand& a, const Input& b,
                    const std::vector<int64_t>& shape);

// out[i] = start + i * step for a 1-D `out` of n elements, computed in
// float64 for float32/float64 outputs, float32 for float16/bfloat16 and
// int64 for integral outputs (PyTorch's CPU accumulation types).
void arange_kernel(const Operand& out, int64_t n, const ScalarValue& start, const ScalarValue& step);

}  // namespace aclsim::opapi
