// Facts about the aclDataType values the simulated operators support:
// element sizes, names, categories and PyTorch's type-promotion rules.
#pragma once

#include <acl/acl.h>

#include <cstddef>
#include <initializer_list>
#include <string>

namespace aclsim::opapi {

// True for the ten dtypes the kernels handle: float32, float16, bfloat16,
// float64, int8, uint8, int16, int32, int64 and bool.
bool is_supported(aclDataType dtype);

// Bytes per element; 0 for dtypes this library does not know.
size_t element_size(aclDataType dtype);

// "float16", "int64", ... or "aclDataType(<n>)" for unknown values.
std::string dtype_name(aclDataType dtype);

bool is_floating(aclDataType dtype);
bool is_integral(aclDataType dtype);  // excludes bool

// Throws OpError naming the argument and its dtype unless the dtype is
// supported (the operator's name is prefixed by the caller).
void require_supported(const char* argument, aclDataType dtype);

// torch.promote_types for two tensor dtypes.
aclDataType promote_types(aclDataType a, aclDataType b);

// torch.can_cast: false when casting would lower the category (floating ->
// integral/bool, integral -> bool).
bool can_cast(aclDataType from, aclDataType to);

// How an operand takes part in torch.result_type: tensors with dims
// dominate 0-dim tensors, which dominate Python numbers, unless a lower
// group brings a higher category (bool < integral < floating).
enum class ArgKind { Tensor, ZeroDimTensor, Number };

struct TypedArg {
  aclDataType dtype;
  ArgKind kind;
};

// torch.result_type over the operands of an elementwise op. A Number of
// floating dtype counts as float32 (the default dtype), an integral one as
// int64.
aclDataType result_type(std::initializer_list<TypedArg> args);

}  // namespace aclsim::opapi
