// bf16 and f16 conversions: exhaustive round trips over every 16-bit pattern, rounding to
// nearest even, overflow, subnormals and NaN.
#include "core/half.h"

#include <bit>
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace ms {
namespace {

float bits_to_float(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(Bf16, EveryPatternRoundTripsExceptThatNaNStaysNaN) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = bf16_to_float(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f)))) << std::hex << b;
    } else {
      EXPECT_EQ(float_to_bf16(f), bits) << std::hex << b;
    }
  }
}

TEST(F16, EveryPatternRoundTripsExceptThatNaNStaysNaN) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = f16_to_float(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(f)))) << std::hex << b;
    } else {
      EXPECT_EQ(float_to_f16(f), bits) << std::hex << b;
    }
  }
}

TEST(Bf16, KnownValues) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
}

TEST(Bf16, RoundsHalfwayCasesToEven) {
  // 1 + 2^-8 lies halfway between 1 (even mantissa) and 1 + 2^-7: rounds down to 1.
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f808000)), 0x3f80);
  // 1 + 3*2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f818000)), 0x3f82);
  // Just above halfway rounds up, just below rounds down.
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f808001)), 0x3f81);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f807fff)), 0x3f80);
}

TEST(Bf16, OverflowBecomesInfinityAndNaNStaysQuietNaN) {
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
  // The largest bf16 (0x7f7f) stays finite.
  EXPECT_EQ(float_to_bf16(bf16_to_float(0x7f7f)), 0x7f7f);
  // A signalling NaN whose payload sits only in the dropped low bits must not become inf.
  const uint16_t nan = float_to_bf16(bits_to_float(0x7f800001));
  EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
  EXPECT_NE(nan & 0x0040, 0) << "quiet bit set";
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(F16, KnownValues) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f16_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_float(0x03ff), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.0f, -14));  // smallest normal
}

TEST(F16, RoundsHalfwayCasesToEven) {
  const float ulp = std::ldexp(1.0f, -10);
  EXPECT_EQ(float_to_f16(1.0f + ulp / 2), 0x3c00);      // tie, even neighbour below
  EXPECT_EQ(float_to_f16(1.0f + 3 * ulp / 2), 0x3c02);  // tie, even neighbour above
  EXPECT_EQ(float_to_f16(std::nextafter(1.0f + ulp / 2, 2.0f)), 0x3c01);
  EXPECT_EQ(float_to_f16(2049.0f), 0x6800);  // 2049 is halfway between 2048 and 2050
  EXPECT_EQ(float_to_f16(2051.0f), 0x6802);
}

TEST(F16, SubnormalsRoundToNearestEven) {
  const float tiny = std::ldexp(1.0f, -24);  // the smallest subnormal
  EXPECT_EQ(float_to_f16(tiny / 2), 0x0000);  // tie between 0 and 1: even is 0
  EXPECT_EQ(float_to_f16(std::nextafter(tiny / 2, 1.0f)), 0x0001);
  EXPECT_EQ(float_to_f16(tiny * 1.5f), 0x0002);  // tie between 1 and 2: even is 2
  EXPECT_EQ(float_to_f16(tiny * 2.5f), 0x0002);  // tie between 2 and 3: even is 2
  EXPECT_EQ(float_to_f16(-tiny), 0x8001);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  // The largest subnormal plus half an ulp rounds up into the smallest normal.
  EXPECT_EQ(float_to_f16(1023.5f * tiny), 0x0400);
}

TEST(F16, OverflowBecomesInfinity) {
  EXPECT_EQ(float_to_f16(65519.0f), 0x7bff);  // below the halfway point to 65536
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // halfway: rounds to even, which is inf
  EXPECT_EQ(float_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(float_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isinf(f16_to_float(0x7c00)));
}

TEST(F16, NaNStaysQuietNaN) {
  const uint16_t nan = float_to_f16(bits_to_float(0x7f800001));  // payload only in low bits
  EXPECT_TRUE(std::isnan(f16_to_float(nan)));
  EXPECT_NE(nan & 0x0200, 0) << "quiet bit set";
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(-std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Half, ConversionsAreUsableAtCompileTime) {
  static_assert(float_to_bf16(1.0f) == 0x3f80);
  static_assert(f16_to_float(0x3c00) == 1.0f);
  static_assert(float_to_f16(0.5f) == 0x3800);
}

}  // namespace
}  // namespace ms
