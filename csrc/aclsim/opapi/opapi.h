// aclsim's libopapi.so: the aclnn operator library, simulated on the CPU.
//
// torch_npu dlopens libopapi.so and dlsyms every aclnn name it uses; if
// either phase of an operator is missing it falls back to
// aclopCompileAndExecute, which aclsim makes fail. So every name of an
// operator family torch_npu 2.13 may look up is implemented here, and names
// that are not implemented do not exist at all (no pretend-success stubs).
//
// Argument objects (tensor.cpp):
//   aclCreateTensor, aclCreateScalar, aclCreateIntArray, aclCreateFloatArray,
//   aclCreateBoolArray, aclCreateTensorList, aclCreateScalarList, the
//   matching aclDestroy* functions, aclGetViewShape.
// Operators (each as aclnnXxxGetWorkspaceSize + aclnnXxx):
//   ops_fill.cpp     aclnnInplaceZero, aclnnInplaceOne, aclnnInplaceFillScalar,
//                    aclnnInplaceFillTensor
//   ops_arith.cpp    aclnnAdd, aclnnAdds, aclnnAddV3, aclnnInplaceAdd,
//                    aclnnInplaceAdds, aclnnSub, aclnnSubs, aclnnInplaceSub,
//                    aclnnInplaceSubs, aclnnRsub, aclnnRsubs, aclnnMul,
//                    aclnnMuls, aclnnInplaceMul, aclnnInplaceMuls, aclnnDiv,
//                    aclnnDivs, aclnnInplaceDiv, aclnnInplaceDivs
//   ops_compare.cpp  aclnn{Eq,Ne,Lt,Le,Gt,Ge}{Tensor,Scalar} and their
//                    aclnnInplace* forms, aclnnEqual, aclnnIsClose
//   ops_bitwise.cpp  aclnnBitwise{And,Or,Xor}{Tensor,Scalar} and their
//                    aclnnInplace* forms
//   ops_unary.cpp    aclnnAbs, aclnnNeg, aclnnCeil, aclnnInplaceCeil, aclnnIsFinite
//   ops_copy.cpp     aclnnInplaceCopy, aclnnCast
//   ops_arange.cpp   aclnnArange
//   ops_reduce.cpp   aclnnReduceSum, aclnnMean, aclnnAll, aclnnAny, aclnnMax,
//                    aclnnMin
//   ops_select.cpp   aclnnMaskedSelect (data-dependent output size)
//   ops_join.cpp     aclnnCat, aclnnStack
// Dtypes: float32, float16, bfloat16, float64, int8, uint8, int16, int32,
// int64, bool; anything else is refused with an error naming op and dtype.
// Semantics follow PyTorch's CPU kernels: inputs are promoted to a common
// dtype, arithmetic runs in its "opmath" type (float32 for the 16-bit
// floats, int64 for integers and bool), and the result is cast to `out`.
//
// This header holds the argument checks shared by the ops_*.cpp files;
// their messages name the argument, and prepare() prefixes the operator.
#pragma once

#include <acl/acl.h>

#include <string>
#include <vector>

#include "dtype.h"
#include "executor.h"
#include "kernels.h"
#include "status.h"
#include "tensor.h"

namespace aclsim::opapi {

// "[2, 3]": a shape as error messages print it.
std::string shape_text(const std::vector<int64_t>& shape);

// The descriptor behind a tensor argument; throws if `t` is null.
const TensorDesc& tensor_arg(const char* name, const aclTensor* t);

// Checks a tensor argument: supported dtype, consistent strides, and (unless
// it is empty) data inside one live device allocation.
void check_tensor(const char* name, const TensorDesc& t);

// Copies a scalar argument after checking it is non-null and of a supported
// dtype.
ScalarValue scalar_arg(const char* name, const aclScalar* s);

// Throws unless `t.shape` broadcasts to `shape`.
void check_broadcast(const char* name, const TensorDesc& t, const std::vector<int64_t>& shape);

// True when the byte ranges spanned by the two views intersect.
bool overlaps(const TensorDesc& a, const TensorDesc& b);

// True when both describe the same elements in the same order and dtype.
bool same_view(const TensorDesc& a, const TensorDesc& b);

// At run time: `in` as an operand of dtype `dtype` over `shape`, copying it
// into a host buffer (kept alive by `keep`) when its dtype differs or when
// it partially overlaps `out` (so the kernel never reads what it already
// wrote).
Operand input_operand(const TensorDesc& in, aclDataType dtype, const TensorDesc& out,
                      const std::vector<int64_t>& shape, std::vector<Materialized>& keep);

// At run time: runs `compute` on an operand of dtype `dtype` shaped like
// `out`, then stores it into `out`; directly when the dtypes match,
// through a temporary buffer and a cast otherwise.
template <class Compute>
void write_output(const TensorDesc& out, aclDataType dtype, Compute&& compute) {
  if (out.dtype == dtype) {
    compute(make_operand(out, out.shape));
    return;
  }
  Materialized scratch = allocate_contiguous(out.shape, dtype);
  const Operand tmp = make_operand(scratch.desc, out.shape);
  compute(tmp);
  cast_kernel(make_operand(out, out.shape), tmp, out.shape);
}

}  // namespace aclsim::opapi

// Defines the four entry points of a binary family with a tensor or scalar
// right operand, e.g. for Stem = Eq: aclnnEqTensor(self, other, out),
// aclnnEqScalar(self, scalar, out), aclnnInplaceEqTensor(selfRef, other) and
// aclnnInplaceEqScalar(selfRef, scalar), each with its launch phase.
// `prepare_fn(op, kind, self, other, other_scalar, out, ws, executor)` does
// the first phase; the in-place forms pass selfRef as out.
#define OPAPI_TENSOR_SCALAR_FAMILY(Stem, prepare_fn, Kind)                                        \
  OPAPI_EXPORT aclnnStatus aclnn##Stem##TensorGetWorkspaceSize(                                   \
      const aclTensor* self, const aclTensor* other, aclTensor* out, uint64_t* workspaceSize,     \
      aclOpExecutor** executor) {                                                                 \
    return prepare_fn("aclnn" #Stem "Tensor", Kind, self, other, nullptr, out, workspaceSize,     \
                      executor);                                                                  \
  }                                                                                               \
  OPAPI_DEFINE_LAUNCH(aclnn##Stem##Tensor)                                                        \
  OPAPI_EXPORT aclnnStatus aclnn##Stem##ScalarGetWorkspaceSize(                                   \
      const aclTensor* self, const aclScalar* other, aclTensor* out, uint64_t* workspaceSize,     \
      aclOpExecutor** executor) {                                                                 \
    return prepare_fn("aclnn" #Stem "Scalar", Kind, self, nullptr, other, out, workspaceSize,     \
                      executor);                                                                  \
  }                                                                                               \
  OPAPI_DEFINE_LAUNCH(aclnn##Stem##Scalar)                                                        \
  OPAPI_EXPORT aclnnStatus aclnnInplace##Stem##TensorGetWorkspaceSize(                            \
      aclTensor* selfRef, const aclTensor* other, uint64_t* workspaceSize,                        \
      aclOpExecutor** executor) {                                                                 \
    return prepare_fn("aclnnInplace" #Stem "Tensor", Kind, selfRef, other, nullptr, selfRef,      \
                      workspaceSize, executor);                                                   \
  }                                                                                               \
  OPAPI_DEFINE_LAUNCH(aclnnInplace##Stem##Tensor)                                                 \
  OPAPI_EXPORT aclnnStatus aclnnInplace##Stem##ScalarGetWorkspaceSize(                            \
      aclTensor* selfRef, const aclScalar* other, uint64_t* workspaceSize,                        \
      aclOpExecutor** executor) {                                                                 \
    return prepare_fn("aclnnInplace" #Stem "Scalar", Kind, selfRef, nullptr, other, selfRef,      \
                      workspaceSize, executor);                                                   \
  }                                                                                               \
  OPAPI_DEFINE_LAUNCH(aclnnInplace##Stem##Scalar)
