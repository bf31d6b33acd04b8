// The CPU reductions against double-precision references, through one table: each row names
// the op, whether it reads bf16, the exact result in double, and the size its error is measured
// against. Sums must stay within the pairwise-summation bound; max and absmax must be exact.
#include "ops/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <ostream>

#include "tests/ops/guarded.h"

namespace ms::ops {
namespace {

constexpr double kUnitRoundoff = 0x1p-24;

// One input in both precisions: the bf16 rows read `narrow`, and their reference uses the
// widened bf16 values, so only the reduction's own rounding is measured.
struct Input {
  std::vector<float> wide;
  std::vector<bf16> narrow;
  std::vector<double> exact;  // the values the op actually sees, in double
};

Input make_input(const std::vector<float>& values, bool as_bf16) {
  Input in{values, test::to_bf16(values), {}};
  for (size_t i = 0; i < values.size(); ++i) {
    in.exact.push_back(as_bf16 ? test::widen(in.narrow[i]) : double{values[i]});
  }
  return in;
}

double exact_sum(const std::vector<double>& x) { return std::accumulate(x.begin(), x.end(), 0.0); }
double exact_abs_sum(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += std::fabs(v);
  return s;
}
double exact_sum_of_squares(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return s;
}
double exact_max(const std::vector<double>& x) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : x) m = std::max(m, v);
  return m;
}
double exact_absmax(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return m;
}
double no_error_allowed(const std::vector<double>&) { return 0; }

struct ReduceCase {
  const char* name;
  bool bf16_input;
  float (*run)(const Input& in);
  double (*reference)(const std::vector<double>& x);
  // Zero for exact ops; otherwise the quantity the rounding error is proportional to.
  double (*magnitude)(const std::vector<double>& x);
};
void PrintTo(const ReduceCase& c, std::ostream* os) { *os << c.name; }

const ReduceCase kReduceCases[] = {
    {"sum_f32", false, [](const Input& in) { return sum(in.wide.data(), in.wide.size()); },
     exact_sum, exact_abs_sum},
    {"sum_bf16", true, [](const Input& in) { return sum(in.narrow.data(), in.narrow.size()); },
     exact_sum, exact_abs_sum},
    {"sum_of_squares_f32", false,
     [](const Input& in) { return sum_of_squares(in.wide.data(), in.wide.size()); },
     exact_sum_of_squares, exact_sum_of_squares},
    {"sum_of_squares_bf16", true,
     [](const Input& in) { return sum_of_squares(in.narrow.data(), in.narrow.size()); },
     exact_sum_of_squares, exact_sum_of_squares},
    {"max_f32", false, [](const Input& in) { return max(in.wide.data(), in.wide.size()); },
     exact_max, no_error_allowed},
    {"max_bf16", true, [](const Input& in) { return max(in.narrow.data(), in.narrow.size()); },
     exact_max, no_error_allowed},
    {"absmax_f32", false, [](const Input& in) { return absmax(in.wide.data(), in.wide.size()); },
     exact_absmax, no_error_allowed},
    {"absmax_bf16", true,
     [](const Input& in) { return absmax(in.narrow.data(), in.narrow.size()); }, exact_absmax,
     no_error_allowed},
};

// Pairwise summation: blocks of kPairwiseBlock summed in order, then ceil(log2) levels of
// pairwise additions; one more rounding for the squares.
double pairwise_error_bound(size_t n, double magnitude) {
  const double levels = n > kPairwiseBlock ? std::ceil(std::log2(double(n) / kPairwiseBlock)) : 0;
  return (kPairwiseBlock + levels + 1) * kUnitRoundoff * magnitude;
}

class ReduceTest : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(ReduceTest, MatchesDoubleReferenceWithinBound) {
  const ReduceCase& c = GetParam();
  std::mt19937_64 rng(3);
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{31}, size_t{64}, size_t{65}, size_t{1000}, size_t{100003}}) {
    const Input in = make_input(test::random_floats(n, rng, -3.0f, 2.0f), c.bf16_input);
    const double exact = c.reference(in.exact);
    const float got = c.run(in);
    const double error = got == exact ? 0.0 : std::fabs(got - exact);  // -inf == -inf for n = 0
    EXPECT_LE(error, pairwise_error_bound(n, c.magnitude(in.exact)))
        << c.name << " n=" << n << " got=" << got << " exact=" << exact;
  }
}

TEST_P(ReduceTest, NanAnywhereGivesNan) {
  const ReduceCase& c = GetParam();
  for (size_t at : {size_t{0}, size_t{500}, size_t{999}}) {
    std::vector<float> values(1000, 1.0f);
    values[at] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(c.run(make_input(values, c.bf16_input)))) << c.name << " at " << at;
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, ReduceTest, ::testing::ValuesIn(kReduceCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ReduceTest, EmptyInputGivesIdentity) {
  EXPECT_EQ(sum(static_cast<const float*>(nullptr), 0), 0.0f);
  EXPECT_EQ(sum_of_squares(static_cast<const bf16*>(nullptr), 0), 0.0f);
  EXPECT_EQ(absmax(static_cast<const float*>(nullptr), 0), 0.0f);
  EXPECT_EQ(max(static_cast<const float*>(nullptr), 0), -std::numeric_limits<float>::infinity());
}

TEST(ReduceTest, PairwiseSumOfManySmallTermsStaysAccurate) {
  // Adding 0.1f 2^20 times left to right in fp32 is off by about 1%; pairwise stays within
  // a few ulps of the exact sum.
  const std::vector<float> x(1 << 20, 0.1f);
  const double exact = double{0.1f} * x.size();
  EXPECT_NEAR(sum(x.data(), x.size()), exact, 4e-6 * exact);
}

TEST(ReduceTest, MaxHandlesAllNegativeAndInfiniteInputs) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> negative = {-5.0f, -2.0f, -7.0f};
  EXPECT_EQ(max(negative.data(), negative.size()), -2.0f);
  EXPECT_EQ(absmax(negative.data(), negative.size()), 7.0f);
  const std::vector<float> infinite = {1.0f, -inf, 3.0f};
  EXPECT_EQ(max(infinite.data(), infinite.size()), 3.0f);
  EXPECT_EQ(absmax(infinite.data(), infinite.size()), inf);
}

}  // namespace
}  // namespace ms::ops
