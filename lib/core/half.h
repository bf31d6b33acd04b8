// Conversions between fp32 and the two 16-bit float formats the toolkit stores and communicates:
// bf16 (8-bit exponent, 7-bit mantissa) and IEEE f16 (5-bit exponent, 10-bit mantissa).
// Written by hand on bit patterns so the results are identical on every CPU and compiler:
// round-to-nearest-even, NaN stays a (quiet) NaN, overflow becomes infinity, and f16
// subnormals are produced and read exactly. Header-inline and constexpr because element loops
// in tensors, collectives and kernels' CPU twins call them per element.
#pragma once

#include <bit>
#include <cstdint>

namespace ms {

// Bit containers for the 16-bit formats, so a buffer of them is not mistaken for integers.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

constexpr uint16_t float_to_bf16(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds half-way cases to the even neighbour; a carry
  // out of the mantissa bumps the exponent, which turns values past the largest bf16 into inf.
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

constexpr float bf16_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

namespace half_detail {

// |value| below 2^-14 becomes an f16 subnormal q * 2^-24 (or zero), rounded to nearest even.
constexpr uint16_t float_to_f16_subnormal(uint32_t magnitude) {
  const uint32_t biased_exponent = magnitude >> 23;
  const uint32_t shift = 126u - biased_exponent;  // >= 14 for every value that reaches here
  if (shift > 24) return 0;                       // below half the smallest subnormal
  const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  uint32_t q = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // q == 0x400 is the smallest normal
  return static_cast<uint16_t>(q);
}

}  // namespace half_detail

constexpr uint16_t float_to_f16(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: keep the top payload bits, force the quiet bit
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds past 65504: inf
  if (magnitude < 0x38800000u) {
    return static_cast<uint16_t>(sign | half_detail::float_to_f16_subnormal(magnitude));
  }
  // Normal range: round at mantissa bit 13 (ties to even), then rebias the exponent 127 -> 15.
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

constexpr float f16_to_float(uint16_t bits) {
  const uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in fp32
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace ms
