// Low-precision number formats, as a GPU stores them: bf16 (8-bit exponent, 7-bit mantissa) and
// IEEE fp16 (5-bit exponent, 10-bit mantissa), both rounded to nearest, ties to even.
//
// A compute tensor in bf16 / fp16 is either held in 2 bytes (the bits below; backend/buf.hpp) or,
// on the emulated path, in fp32 containers holding only values of the format (round_to applied
// after each op that writes it): the same numbers either way.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace mpitrain {

enum class Precision { Fp32, Bf16, Fp16 };

Precision parse_precision(const std::string& name);  // "fp32" | "bf16" | "fp16", else UsageError
std::string to_string(Precision p);

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// bf16 bits of x: the upper 16 bits after rounding the lower 16 to nearest even; NaN stays NaN.
inline uint16_t to_bf16_bits(float x) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float from_bf16_bits(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// fp16 bits of x, round to nearest even; beyond 65504 (after rounding) -> +-inf, as a GPU's
// conversion does; subnormals kept.
inline uint16_t to_fp16_bits(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {                                             // below 2^-14: subnormal
    // value = a_float; fp16 subnormal unit is 2^-24: round(a_float * 2^24) to nearest even.
    const float f = bits_float(a) * 16777216.0f;  // exact: scaling by a power of two
    const uint32_t i = static_cast<uint32_t>(f);
    const float rest = f - static_cast<float>(i);
    const uint32_t r = i + ((rest > 0.5f || (rest == 0.5f && (i & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  const uint32_t rounding = 0xfffu + ((a >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((a - (112u << 23) + rounding) >> 13));
}

inline float from_fp16_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) return bits_float(sign | float_bits(static_cast<float>(man) / 16777216.0f));
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// The 2-byte bits of x in p (Bf16 or Fp16), rounded to nearest even; and back, exactly.
inline uint16_t to_half_bits(float x, Precision p) {
  return p == Precision::Bf16 ? to_bf16_bits(x) : to_fp16_bits(x);
}
inline float from_half_bits(uint16_t bits, Precision p) {
  return p == Precision::Bf16 ? from_bf16_bits(bits) : from_fp16_bits(bits);
}

// x rounded to the nearest value of precision p (identity for fp32).
inline float round_to(float x, Precision p) {
  switch (p) {
    case Precision::Bf16: return from_bf16_bits(to_bf16_bits(x));
    case Precision::Fp16: return from_fp16_bits(to_fp16_bits(x));
    case Precision::Fp32: break;
  }
  return x;
}

}  // namespace mpitrain
