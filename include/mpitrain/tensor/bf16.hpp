// bfloat16 as raw bits: the top 16 bits of an IEEE-754 fp32 (sign, 8-bit exponent, 7-bit mantissa).
#pragma once

#include <bit>
#include <cstdint>

namespace mpitrain {

using bf16_bits = uint16_t;

// fp32 -> bf16, round to nearest, ties to even; Inf stays Inf, NaN stays a quiet NaN (same sign),
// finite values past the largest bf16 round to Inf.
constexpr bf16_bits float_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<bf16_bits>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<bf16_bits>((bits + rounding) >> 16);
}

// bf16 -> fp32, exact.
constexpr float bf16_to_float(bf16_bits value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value) << 16);
}

}  // namespace mpitrain
