// IEEE binary16 (float16) and bfloat16 <-> float32 conversions.
//
// Narrowing rounds to nearest, ties to even, handles subnormals and
// overflow to infinity, and keeps a NaN's sign and top payload bits (made
// quiet), as the F16C/AVX conversions PyTorch's CPU kernels use do. Widening
// is exact, so narrow(widen(x)) == x for every non-NaN bit pattern.
#pragma once

#include <cstdint>
#include <cstring>

namespace aclsim::opapi {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {  // infinity or NaN: keep the payload
    return bits_float(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    // Subnormal: mantissa * 2^-24, exact in float32.
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {                            // NaN
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;      // >= 65520: inf
  if (magnitude < 0x38800000u) {                            // < 2^-14
    // Result is a half subnormal (or zero): round magnitude / 2^-24.
    const uint32_t biased_exponent = magnitude >> 23;
    const uint32_t shift = 126u - biased_exponent;          // >= 14
    if (shift > 24u) return sign;                           // < 2^-25: zero
    const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    uint32_t quotient = significand >> shift;
    const uint32_t remainder = significand & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (quotient & 1u))) ++quotient;
    return static_cast<uint16_t>(sign | quotient);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits.
  const uint32_t odd = (magnitude >> 13) & 1u;
  const uint32_t rounded = magnitude - 0x38000000u + 0xfffu + odd;
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

inline float bf16_to_float(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and payload, quiet
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  const uint32_t odd = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + odd) >> 16);
}

}  // namespace aclsim::opapi
