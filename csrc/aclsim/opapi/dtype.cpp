// Element sizes, names and promotion rules for aclDataType.
#include "dtype.h"

#include "status.h"

namespace aclsim::opapi {

bool is_supported(aclDataType dtype) {
  switch (dtype) {
    case ACL_FLOAT: case ACL_FLOAT16: case ACL_BF16: case ACL_DOUBLE:
    case ACL_INT8: case ACL_UINT8: case ACL_INT16: case ACL_INT32:
    case ACL_INT64: case ACL_BOOL:
      return true;
    default:
      return false;
  }
}

size_t element_size(aclDataType dtype) {
  switch (dtype) {
    case ACL_BOOL: case ACL_INT8: case ACL_UINT8: return 1;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
    case ACL_DOUBLE: case ACL_INT64: case ACL_UINT64: case ACL_COMPLEX64: return 8;
    case ACL_COMPLEX128: return 16;
    default: return 0;
  }
}

std::string dtype_name(aclDataType dtype) {
  switch (dtype) {
    case ACL_FLOAT: return "float32";
    case ACL_FLOAT16: return "float16";
    case ACL_BF16: return "bfloat16";
    case ACL_DOUBLE: return "float64";
    case ACL_INT8: return "int8";
    case ACL_UINT8: return "uint8";
    case ACL_INT16: return "int16";
    case ACL_INT32: return "int32";
    case ACL_INT64: return "int64";
    case ACL_BOOL: return "bool";
    case ACL_UINT16: return "uint16";
    case ACL_UINT32: return "uint32";
    case ACL_UINT64: return "uint64";
    case ACL_COMPLEX64: return "complex64";
    case ACL_COMPLEX128: return "complex128";
    default: return "aclDataType(" + std::to_string(static_cast<int>(dtype)) + ")";
  }
}

bool is_floating(aclDataType dtype) {
  return dtype == ACL_FLOAT || dtype == ACL_FLOAT16 || dtype == ACL_BF16 || dtype == ACL_DOUBLE;
}

bool is_integral(aclDataType dtype) {
  return dtype == ACL_INT8 || dtype == ACL_UINT8 || dtype == ACL_INT16 ||
         dtype == ACL_INT32 || dtype == ACL_INT64;
}

void require_supported(const char* argument, aclDataType dtype) {
  if (!is_supported(dtype)) {
    throw_invalid(std::string(argument) + " has unsupported dtype " +
                  dtype_name(dtype) + " (aclsim supports float32, float16, bfloat16, "
                  "float64, int8, uint8, int16, int32, int64 and bool)");
  }
}

namespace {

// 0 = bool, 1 = integral, 2 = floating.
int category(aclDataType dtype) {
  if (dtype == ACL_BOOL) return 0;
  return is_floating(dtype) ? 2 : 1;
}

aclDataType promote_integral(aclDataType a, aclDataType b) {
  if (a == b) return a;
  if (a == ACL_UINT8 || b == ACL_UINT8) {
    // uint8 with a signed type: the smallest signed type holding both.
    const aclDataType other = (a == ACL_UINT8) ? b : a;
    return other == ACL_INT8 ? ACL_INT16 : other;
  }
  return element_size(a) >= element_size(b) ? a : b;
}

aclDataType promote_floating(aclDataType a, aclDataType b) {
  if (a == b) return a;
  if ((a == ACL_FLOAT16 && b == ACL_BF16) || (a == ACL_BF16 && b == ACL_FLOAT16)) return ACL_FLOAT;
  return element_size(a) >= element_size(b) ? a : b;
}

}  // namespace

aclDataType promote_types(aclDataType a, aclDataType b) {
  if (a == ACL_DT_UNDEFINED) return b;
  if (b == ACL_DT_UNDEFINED) return a;
  const int ca = category(a);
  const int cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 0) return ACL_BOOL;
  return ca == 1 ? promote_integral(a, b) : promote_floating(a, b);
}

bool can_cast(aclDataType from, aclDataType to) {
  return category(from) <= category(to);
}

namespace {

// Combines the result of a dominant operand group with a weaker one.
aclDataType combine(aclDataType higher, aclDataType lower) {
  if (higher == ACL_DT_UNDEFINED) return lower;
  if (lower == ACL_DT_UNDEFINED || is_floating(higher)) return higher;
  if (higher == ACL_BOOL || is_floating(lower)) return promote_types(higher, lower);
  return higher;
}

}  // namespace

aclDataType result_type(std::initializer_list<TypedArg> args) {
  aclDataType tensors = ACL_DT_UNDEFINED;
  aclDataType zero_dim = ACL_DT_UNDEFINED;
  aclDataType numbers = ACL_DT_UNDEFINED;
  for (const TypedArg& arg : args) {
    switch (arg.kind) {
      case ArgKind::Tensor: tensors = promote_types(tensors, arg.dtype); break;
      case ArgKind::ZeroDimTensor: zero_dim = promote_types(zero_dim, arg.dtype); break;
      case ArgKind::Number: {
        const aclDataType as = is_floating(arg.dtype) ? ACL_FLOAT
                               : arg.dtype == ACL_BOOL ? ACL_BOOL : ACL_INT64;
        numbers = promote_types(numbers, as);
        break;
      }
    }
  }
  return combine(tensors, combine(zero_dim, numbers));
}

}  // namespace aclsim::opapi
