// Element storage types and value conversions between them.
//
// Each supported aclDataType has a storage type (what sits in memory) and a
// "natural" C++ value type (float for float16/bfloat16, bool for bool, the
// type itself otherwise). A conversion S -> D goes storage -> natural(S) ->
// natural(D) -> storage, which reproduces PyTorch's CPU casts: float64 and
// int64 reach float16/bfloat16 through float32, float -> int truncates
// toward zero and wraps like x86's cvtt* instructions, anything -> bool is
// "!= 0".
#pragma once

#include <acl/acl.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "dtype.h"
#include "float16.h"
#include "status.h"

namespace aclsim::opapi {

struct f16 { uint16_t bits; };
struct bf16 { uint16_t bits; };
struct b8 { uint8_t value; };  // bool stored as one byte

template <class S> struct Natural { using type = S; };
template <> struct Natural<f16> { using type = float; };
template <> struct Natural<bf16> { using type = float; };
template <> struct Natural<b8> { using type = bool; };
template <class S> using natural_t = typename Natural<S>::type;

// Stored element -> its natural value.
template <class S> inline natural_t<S> load(S s) { return s; }
template <> inline float load<f16>(f16 s) { return half_to_float(s.bits); }
template <> inline float load<bf16>(bf16 s) { return bf16_to_float(s.bits); }
template <> inline bool load<b8>(b8 s) { return s.value != 0; }

// Natural value -> stored element.
template <class S> inline S store(natural_t<S> v) { return v; }
template <> inline f16 store<f16>(float v) { return f16{float_to_half(v)}; }
template <> inline bf16 store<bf16>(float v) { return bf16{float_to_bf16(v)}; }
template <> inline b8 store<b8>(bool v) { return b8{static_cast<uint8_t>(v ? 1 : 0)}; }

// Floating -> integral without undefined behaviour, reproducing what
// PyTorch's static_cast compiles to on x86: the value is truncated toward
// zero into int32 (for targets of up to 4 bytes) or int64, NaN and
// out-of-range values give that type's minimum (cvttss2si's "integer
// indefinite"), and the result then wraps to the target type.
template <class I, class F>
inline I float_to_integral(F f) {
  using Wide = std::conditional_t<(sizeof(I) <= 4), int32_t, int64_t>;
  constexpr F lo = sizeof(Wide) == 4 ? F(-2147483648.0) : F(-9223372036854775808.0);
  Wide wide = std::numeric_limits<Wide>::min();
  if (f >= lo && f < -lo) wide = static_cast<Wide>(f);
  return static_cast<I>(wide);
}

// Natural value -> another natural type.
template <class To, class From>
inline To value_cast(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return float_to_integral<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// Stored S -> stored D.
template <class D, class S>
inline D convert(S s) {
  return store<D>(value_cast<natural_t<D>>(load(s)));
}

// The type PyTorch computes in for each storage type ("opmath"): float for
// float16/bfloat16/float32, double for float64, int64 for the integral types
// and for bool (whose results are then turned back into "!= 0").
template <class S> struct OpMath { using type = int64_t; };
template <> struct OpMath<float> { using type = float; };
template <> struct OpMath<f16> { using type = float; };
template <> struct OpMath<bf16> { using type = float; };
template <> struct OpMath<double> { using type = double; };
template <class S> using opmath_t = typename OpMath<S>::type;

// Calls f(T{}) with T the storage type of `dtype`; throws for other dtypes.
template <class F>
decltype(auto) dispatch_dtype(aclDataType dtype, F&& f) {
  switch (dtype) {
    case ACL_FLOAT: return f(float{});
    case ACL_FLOAT16: return f(f16{});
    case ACL_BF16: return f(bf16{});
    case ACL_DOUBLE: return f(double{});
    case ACL_INT8: return f(int8_t{});
    case ACL_UINT8: return f(uint8_t{});
    case ACL_INT16: return f(int16_t{});
    case ACL_INT32: return f(int32_t{});
    case ACL_INT64: return f(int64_t{});
    case ACL_BOOL: return f(b8{});
    default:
      throw_invalid("unsupported dtype " + dtype_name(dtype));
  }
}

}  // namespace aclsim::opapi
