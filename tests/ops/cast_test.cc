// The bulk casts against an independent reference: every finite 16-bit value is decoded from its
// fields in double, and an fp32 input must become the nearest one (ties to the even code,
// overflow to infinity, NaN to NaN). Narrowing runs on special values and random bit patterns;
// widening runs on all 65536 codes. Outputs sit between guard bands.
#include "ops/cast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>

#include "tests/ops/guarded.h"

namespace ms::ops {
namespace {

// Field widths of a 16-bit IEEE-style format.
struct Format16 {
  int exponent_bits;
  int mantissa_bits;

  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  uint16_t max_exponent() const { return static_cast<uint16_t>((1 << exponent_bits) - 1); }
  uint16_t largest_finite_code() const {
    return static_cast<uint16_t>((max_exponent() << mantissa_bits) - 1);
  }
  uint16_t infinity_code() const { return static_cast<uint16_t>(max_exponent() << mantissa_bits); }
};
constexpr Format16 kBf16{8, 7};
constexpr Format16 kF16{5, 10};

// The value of `code` read field by field (exact in double); NaN for NaN codes.
double decode(Format16 f, uint16_t code) {
  const bool negative = code & 0x8000u;
  const int exponent = (code & 0x7fffu) >> f.mantissa_bits;
  const double mantissa = code & ((1u << f.mantissa_bits) - 1u);
  const double scale = std::ldexp(1.0, -f.mantissa_bits);
  double magnitude;
  if (exponent == f.max_exponent()) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa * scale, 1 - f.bias());
  } else {
    magnitude = std::ldexp(1.0 + mantissa * scale, exponent - f.bias());
  }
  return negative ? -magnitude : magnitude;
}

// The code nearest to x (ties to the even code); past the largest finite value plus half its
// ulp, infinity. NaN gives the infinity code with a mantissa bit set.
uint16_t nearest_code(Format16 f, float x) {
  if (std::isnan(x)) return static_cast<uint16_t>(f.infinity_code() | 1u);
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  const double a = std::fabs(static_cast<double>(x));
  // Positive finite codes are ordered like their values: find the last one <= a.
  uint16_t lo = 0, hi = f.largest_finite_code();
  while (lo < hi) {
    const auto mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (decode(f, mid) <= a) {
      lo = mid;
    } else {
      hi = static_cast<uint16_t>(mid - 1);
    }
  }
  const uint16_t below = lo;
  const uint16_t above = static_cast<uint16_t>(below + 1);  // may be the infinity code
  const double above_value =
      above == f.infinity_code()
          ? 2 * decode(f, below) - decode(f, static_cast<uint16_t>(below - 1))  // one ulp past
          : decode(f, above);
  const double down = a - decode(f, below);
  const double up = above_value - a;
  const bool round_up = up < down || (up == down && (above & 1u) == 0);
  return static_cast<uint16_t>(sign | (round_up ? above : below));
}

bool same_value(float got, double expected) {
  return (std::isnan(got) && std::isnan(expected)) || got == expected;
}

// Values that exercise every rounding rule: zeros, ties, the overflow threshold, subnormals.
std::vector<float> special_floats() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, std::nanf(""), -std::nanf(""),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(), std::numeric_limits<float>::max(),
                          65504.0f, 65519.99f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f,
                          0x1p-14f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1p-11f,
                          1.0f + 0x3p-11f, 0x1.fep127f, 0x1.ffp127f};
  for (size_t i = 0, n = v.size(); i < n; ++i) v.push_back(-v[i]);
  return v;
}

// Runs a narrowing cast into a guarded output and returns the codes it wrote.
template <typename Half, void (*Cast)(const float*, Half*, size_t)>
std::vector<uint16_t> narrow_guarded(const std::vector<float>& x) {
  test::Guarded<Half> out(x.size());
  Cast(x.data(), out.data(), x.size());
  EXPECT_TRUE(out.guards_intact()) << "wrote outside its output";
  std::vector<uint16_t> codes(x.size());
  for (size_t i = 0; i < x.size(); ++i) codes[i] = out[i].bits;
  return codes;
}

// Runs a widening cast on the given codes into a guarded output.
template <typename Half, void (*Cast)(const Half*, float*, size_t)>
std::vector<float> widen_guarded(const std::vector<uint16_t>& codes) {
  std::vector<Half> x(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) x[i].bits = codes[i];
  test::Guarded<float> out(codes.size());
  Cast(x.data(), out.data(), x.size());
  EXPECT_TRUE(out.guards_intact()) << "wrote outside its output";
  return {out.data(), out.data() + codes.size()};
}

std::vector<uint16_t> all_codes() {
  std::vector<uint16_t> codes(65536);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint16_t>(i);
  return codes;
}

struct NarrowCase {
  const char* name;
  Format16 format;
  std::vector<uint16_t> (*run)(const std::vector<float>& x);
};
void PrintTo(const NarrowCase& c, std::ostream* os) { *os << c.name; }

const NarrowCase kNarrowCases[] = {
    {"f32_to_bf16", kBf16, narrow_guarded<bf16, f32_to_bf16>},
    {"f32_to_f16", kF16, narrow_guarded<f16, f32_to_f16>},
};

class NarrowTest : public ::testing::TestWithParam<NarrowCase> {};

TEST_P(NarrowTest, RoundsToNearestEvenCode) {
  const NarrowCase& c = GetParam();
  std::mt19937_64 rng(7);
  std::vector<float> x = special_floats();
  const std::vector<float> random = test::random_float_bits(20000, rng);
  x.insert(x.end(), random.begin(), random.end());
  const std::vector<uint16_t> out = c.run(x);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(decode(c.format, out[i]))) << c.name << " x=" << x[i];
    } else {
      ASSERT_EQ(out[i], nearest_code(c.format, x[i]))
          << c.name << " i=" << i << " x=" << std::hexfloat << x[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, NarrowTest, ::testing::ValuesIn(kNarrowCases),
                         [](const auto& info) { return std::string(info.param.name); });

struct WidenCase {
  const char* name;
  Format16 format;
  std::vector<float> (*run)(const std::vector<uint16_t>& codes);
};
void PrintTo(const WidenCase& c, std::ostream* os) { *os << c.name; }

const WidenCase kWidenCases[] = {
    {"bf16_to_f32", kBf16, widen_guarded<bf16, bf16_to_f32>},
    {"f16_to_f32", kF16, widen_guarded<f16, f16_to_f32>},
};

class WidenTest : public ::testing::TestWithParam<WidenCase> {};

TEST_P(WidenTest, EveryCodeWidensExactly) {
  const WidenCase& c = GetParam();
  const std::vector<uint16_t> codes = all_codes();
  const std::vector<float> out = c.run(codes);
  for (size_t i = 0; i < codes.size(); ++i) {
    ASSERT_TRUE(same_value(out[i], decode(c.format, codes[i]))) << c.name << " code=" << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, WidenTest, ::testing::ValuesIn(kWidenCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(CastTest, RoundTripThroughSixteenBitsIsIdentityOnCodes) {
  const std::vector<uint16_t> codes = all_codes();
  const std::vector<float> wide = widen_guarded<f16, f16_to_f32>(codes);
  const std::vector<uint16_t> narrow = narrow_guarded<f16, f32_to_f16>(wide);
  for (size_t i = 0; i < codes.size(); ++i) {
    if (std::isnan(wide[i])) continue;
    ASSERT_EQ(narrow[i], codes[i]) << "code " << i;
  }
}

// round_to_bf16 is the narrowing cast widened back: the nearest bf16 value, in fp32, out of
// place and in place.
TEST(CastTest, RoundToBf16IsTheNearestBf16Value) {
  std::mt19937_64 rng(11);
  std::vector<float> x = special_floats();
  const std::vector<float> random = test::random_float_bits(20000, rng);
  x.insert(x.end(), random.begin(), random.end());
  test::Guarded<float> out(x.size());
  round_to_bf16(x.data(), out.data(), x.size());
  EXPECT_TRUE(out.guards_intact()) << "wrote outside its output";
  std::vector<float> in_place = x;
  round_to_bf16(in_place.data(), in_place.data(), in_place.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double expected = decode(kBf16, nearest_code(kBf16, x[i]));
    ASSERT_TRUE(same_value(out[i], expected)) << "i=" << i << " x=" << std::hexfloat << x[i];
    ASSERT_TRUE(same_value(in_place[i], expected)) << "in place, i=" << i;
  }
}

TEST(CastTest, EmptyInputWritesNothing) {
  test::Guarded<bf16> out(0);
  f32_to_bf16(nullptr, out.data(), 0);
  EXPECT_TRUE(out.guards_intact());
}

}  // namespace
}  // namespace ms::ops
