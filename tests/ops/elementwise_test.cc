// The elementwise CPU operators against double-precision references, through one table: a new
// elementwise op joins by adding a row (how to run it, its exact result, the error it may have).
// Every output sits between guard bands that must be untouched afterwards.
#include "ops/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <ostream>

#include "tests/ops/guarded.h"

namespace ms::ops {
namespace {

constexpr float kAlpha = 0.3f;             // not a power of two, so products round
constexpr double kUnitRoundoff = 0x1p-24;  // fp32

// Distance from |v| to the next larger float, in double.
double ulp(float v) {
  const float a = std::fabs(v);
  return static_cast<double>(std::nextafter(a, std::numeric_limits<float>::infinity())) - a;
}

struct MapCase {
  const char* name;
  // Reads a and b, writes out: (n). out holds b's values before the call (for in-place ops).
  std::function<void(const float* a, const float* b, float* out, size_t n)> run;
  // The exact result for one element, and how far a correct fp32 implementation may be from it.
  std::function<double(double a, double b)> reference;
  std::function<double(double a, double b, double exact)> allowed_error;
};

void PrintTo(const MapCase& c, std::ostream* os) { *os << c.name; }

// One rounding of the exact result: within half an ulp.
double correctly_rounded(double, double, double exact) {
  return 0.5 * ulp(static_cast<float>(exact));
}

const MapCase kMapCases[] = {
    {"add", [](const float* a, const float* b, float* out, size_t n) { add(a, b, out, n); },
     [](double a, double b) { return a + b; }, correctly_rounded},
    {"scale", [](const float* a, const float*, float* out, size_t n) { scale(a, kAlpha, out, n); },
     [](double a, double) { return double{kAlpha} * a; }, correctly_rounded},
    // y = b, then y += alpha * a: two roundings, bounded by u * (|alpha a| + |result|).
    {"axpy", [](const float* a, const float*, float* out, size_t n) { axpy(kAlpha, a, out, n); },
     [](double a, double b) { return b + double{kAlpha} * a; },
     [](double a, double, double exact) {
       return kUnitRoundoff * (std::fabs(double{kAlpha} * a) + std::fabs(exact)) * 1.0000001;
     }},
};

class MapTest : public ::testing::TestWithParam<MapCase> {};

TEST_P(MapTest, MatchesDoubleReferenceAndStaysInBounds) {
  const MapCase& c = GetParam();
  std::mt19937_64 rng(42);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{64}, size_t{1000}, size_t{4099}}) {
    const std::vector<float> a = test::random_floats(n, rng);
    const std::vector<float> b = test::random_floats(n, rng);
    test::Guarded<float> out(b);
    c.run(a.data(), b.data(), out.data(), n);
    EXPECT_TRUE(out.guards_intact()) << c.name << " wrote outside its output, n=" << n;
    for (size_t i = 0; i < n; ++i) {
      const double exact = c.reference(a[i], b[i]);
      ASSERT_LE(std::fabs(out[i] - exact), c.allowed_error(a[i], b[i], exact))
          << c.name << " n=" << n << " i=" << i << " a=" << a[i] << " b=" << b[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, MapTest, ::testing::ValuesIn(kMapCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ElementwiseTest, AddAndScaleWorkInPlace) {
  std::vector<float> x = {1.0f, -2.0f, 3.5f};
  add(x.data(), x.data(), x.data(), x.size());
  EXPECT_EQ(x, (std::vector<float>{2.0f, -4.0f, 7.0f}));
  scale(x.data(), 0.5f, x.data(), x.size());
  EXPECT_EQ(x, (std::vector<float>{1.0f, -2.0f, 3.5f}));
}

TEST(ElementwiseTest, AxpyRoundsProductAndSumSeparately) {
  // alpha * x = 1 + 2^-11 + 2^-24 exactly; rounded to fp32 (a tie, to even) it is 1 + 2^-11, so
  // -1 + that is 2^-11. A fused multiply-add would keep the 2^-24 and give 2^-11 + 2^-24.
  const float alpha = 1.0f + 0x1p-12f;
  const float x = 1.0f + 0x1p-12f;
  float y = -1.0f;
  axpy(alpha, &x, &y, 1);
  EXPECT_EQ(y, 0x1p-11f);
}

TEST(ElementwiseTest, NanAndInfinityPropagate) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> a = {std::nanf(""), inf, 1.0f};
  const std::vector<float> b = {1.0f, -inf, inf};
  std::vector<float> out(3);
  add(a.data(), b.data(), out.data(), 3);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], inf);
}

}  // namespace
}  // namespace ms::ops
