// linear_forward (ops/linear.h) against a double-precision product, over a table of shapes on
// both sides of kLinearGemvMaxRows: up to it the rows go through the streaming GEMV, past it
// through sgemm, and either must stay within the dot-product rounding bound. Through the GEMV
// each row also gives the same bits alone as in its batch, and nothing outside y is written.
#include "ops/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/ops/guarded.h"

namespace ms::ops {
namespace {

constexpr double kUnitRoundoff = 0x1p-24;

struct LinearCase {
  const char* name;
  int64_t n, in, out;
};

// GEMV rows 1 .. kLinearGemvMaxRows with input widths below, at and past a vector width and
// past the GEMV's long-row threshold (4096, where it takes four output rows at a time); then
// sgemm just past the threshold and well past it.
const LinearCase kCases[] = {
    {"gemv_tiny", 1, 1, 1},        {"gemv_short", 1, 37, 100},  {"gemv_two", 2, 64, 33},
    {"gemv_three", 3, 129, 17},    {"gemv_four", 4, 16, 71},    {"gemv_long", 1, 4100, 9},
    {"gemv_long_four", 4, 4112, 7}, {"sgemm_five", 5, 33, 40},  {"sgemm_many", 17, 130, 65},
};

static_assert(kLinearGemvMaxRows == 4, "the table's gemv and sgemm cases straddle this");

std::vector<float> run_forward(const std::vector<float>& x, const std::vector<float>& w,
                               int64_t n, int64_t in, int64_t out) {
  test::Guarded<float> y(static_cast<size_t>(n * out));
  linear_forward(x.data(), w.data(), y.data(), n, in, out);
  EXPECT_TRUE(y.guards_intact()) << "linear_forward wrote outside y";
  return {y.data(), y.data() + y.size()};
}

// Through the GEMV a row of x gives the same bits alone as in its batch.
void expect_rows_alone_match_batch(const LinearCase& c) {
  std::mt19937_64 rng(7);
  const std::vector<float> x = test::random_floats(static_cast<size_t>(c.n * c.in), rng, -1, 1);
  const std::vector<float> w = test::random_floats(static_cast<size_t>(c.out * c.in), rng, -1, 1);
  const std::vector<float> batch = run_forward(x, w, c.n, c.in, c.out);
  for (int64_t t = 0; t < c.n; ++t) {
    const std::vector<float> row(x.begin() + t * c.in, x.begin() + (t + 1) * c.in);
    const std::vector<float> alone = run_forward(row, w, 1, c.in, c.out);
    for (int64_t r = 0; r < c.out; ++r) {
      ASSERT_EQ(alone[r], batch[t * c.out + r]) << c.name << " row " << t << " output " << r;
    }
  }
}

class LinearForwardTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearForwardTest, MatchesTheExactProductWithinSummationRounding) {
  const LinearCase& c = GetParam();
  std::mt19937_64 rng(static_cast<uint64_t>(c.n * 100000 + c.in * 100 + c.out));
  const std::vector<float> x = test::random_floats(static_cast<size_t>(c.n * c.in), rng, -1, 1);
  const std::vector<float> w = test::random_floats(static_cast<size_t>(c.out * c.in), rng, -1, 1);
  const std::vector<float> y = run_forward(x, w, c.n, c.in, c.out);
  for (int64_t t = 0; t < c.n; ++t) {
    for (int64_t r = 0; r < c.out; ++r) {
      double exact = 0, bound = 0;
      for (int64_t k = 0; k < c.in; ++k) {
        const double term = double{x[t * c.in + k]} * w[r * c.in + k];
        exact += term;
        bound += std::fabs(term);
      }
      ASSERT_NEAR(y[t * c.out + r], exact, (c.in + 2) * kUnitRoundoff * bound)
          << c.name << " y[" << t << "," << r << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, LinearForwardTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// sgemm makes no per-row promise, so only the table's GEMV cases are checked.
TEST(LinearForwardGemvTest, EachRowGivesTheSameBitsAloneAsInTheBatch) {
  for (const LinearCase& c : kCases) {
    if (c.n <= kLinearGemvMaxRows) expect_rows_alone_match_batch(c);
  }
}

}  // namespace
}  // namespace ms::ops
