// sgemm and gemm_bf16 against a double-precision triple loop, over every transpose combination,
// padded leading dimensions and odd shapes. C's padding columns and the bands around C are
// sentinels that must survive. check_gemm_shape is tested on each kind of bad argument.
#include "ops/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <utility>

#include "tests/ops/guarded.h"

namespace ms::ops {
namespace {

constexpr double kUnitRoundoff = 0x1p-24;

struct Shape {
  int64_t m, n, k;
};

// A stored row-major matrix of rows x cols with `pad` extra elements per row.
struct Stored {
  int64_t rows, cols, ld;
  std::vector<float> values;
  double at(int64_t r, int64_t c) const { return values[r * ld + c]; }
};

Stored random_stored(int64_t rows, int64_t cols, int64_t pad, std::mt19937_64& rng) {
  const int64_t ld = cols + pad;
  return {rows, cols, ld, test::random_floats(static_cast<size_t>(rows * ld), rng, -1.0f, 1.0f)};
}

// op(X)[i][j] read from the stored matrix.
double op_at(const Stored& x, Transpose t, int64_t i, int64_t j) {
  return t == Transpose::kNo ? x.at(i, j) : x.at(j, i);
}

struct GemmCheck {
  Transpose ta, tb;
  Shape s;
  int64_t pad;
};

// The bf16 path sees bf16 operands: its inputs are drawn already representable in bf16, so the
// widening inside gemm_bf16 is exact and the same reference applies.
Stored rounded_to_bf16(Stored x) {
  for (float& v : x.values) v = bf16_to_float(float_to_bf16(v));
  return x;
}

using GemmFn = void (*)(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                        const Stored& a, const Stored& b, float beta, float* c, int64_t ldc);

// Runs `gemm` on random operands and checks every element of C against the exact product,
// allowing k+2 roundings of the absolute terms (the standard dot-product bound).
void check_gemm(const GemmCheck& g, GemmFn gemm, bool bf16_operands, const char* name) {
  std::mt19937_64 rng(static_cast<uint64_t>(g.s.m * 1000 + g.s.n * 10 + g.s.k));
  const float alpha = 0.75f, beta = -0.5f;
  Stored a = g.ta == Transpose::kNo ? random_stored(g.s.m, g.s.k, g.pad, rng)
                                    : random_stored(g.s.k, g.s.m, g.pad, rng);
  Stored b = g.tb == Transpose::kNo ? random_stored(g.s.k, g.s.n, g.pad, rng)
                                    : random_stored(g.s.n, g.s.k, g.pad, rng);
  if (bf16_operands) {
    a = rounded_to_bf16(std::move(a));
    b = rounded_to_bf16(std::move(b));
  }
  const int64_t ldc = g.s.n + g.pad;
  test::Guarded<float> c(test::random_floats(static_cast<size_t>(g.s.m * ldc), rng));
  const std::vector<float> c_before(c.data(), c.data() + g.s.m * ldc);
  gemm(g.ta, g.tb, g.s.m, g.s.n, g.s.k, alpha, a, b, beta, c.data(), ldc);
  EXPECT_TRUE(c.guards_intact()) << name;
  for (int64_t i = 0; i < g.s.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = c[i * ldc + j];
      if (j >= g.s.n) {  // padding between rows of C is never written
        ASSERT_EQ(got, c_before[i * ldc + j]) << name << " wrote padding at " << i << "," << j;
        continue;
      }
      double exact = 0, bound = 0;
      for (int64_t p = 0; p < g.s.k; ++p) {
        const double term = op_at(a, g.ta, i, p) * op_at(b, g.tb, p, j);
        exact += term;
        bound += std::fabs(term);
      }
      exact = alpha * exact + beta * c_before[i * ldc + j];
      bound =
          (g.s.k + 2) * kUnitRoundoff * (alpha * bound + std::fabs(beta * c_before[i * ldc + j]));
      ASSERT_NEAR(got, exact, bound) << name << " C[" << i << "," << j << "]";
    }
  }
}

void run_sgemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
               const Stored& a, const Stored& b, float beta, float* c, int64_t ldc) {
  sgemm(ta, tb, m, n, k, alpha, a.values.data(), a.ld, b.values.data(), b.ld, beta, c, ldc);
}

void run_gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                   const Stored& a, const Stored& b, float beta, float* c, int64_t ldc) {
  const std::vector<bf16> a16 = test::to_bf16(a.values);
  const std::vector<bf16> b16 = test::to_bf16(b.values);
  gemm_bf16(ta, tb, m, n, k, alpha, a16.data(), a.ld, b16.data(), b.ld, beta, c, ldc);
}

const Shape kShapes[] = {{1, 1, 1}, {3, 5, 7}, {17, 13, 33}, {64, 1, 9}, {1, 40, 128}};

class GemmTest
    : public ::testing::TestWithParam<std::tuple<Transpose, Transpose, int64_t /*pad*/>> {};

TEST_P(GemmTest, SgemmMatchesExactProduct) {
  const auto [ta, tb, pad] = GetParam();
  for (const Shape& s : kShapes) check_gemm({ta, tb, s, pad}, run_sgemm, false, "sgemm");
}

TEST_P(GemmTest, GemmBf16MatchesExactProductOfWidenedOperands) {
  const auto [ta, tb, pad] = GetParam();
  for (const Shape& s : kShapes) check_gemm({ta, tb, s, pad}, run_gemm_bf16, true, "gemm_bf16");
}

std::string gemm_case_name(
    const ::testing::TestParamInfo<std::tuple<Transpose, Transpose, int64_t>>& info) {
  const auto letter = [](Transpose t) { return t == Transpose::kNo ? "N" : "T"; };
  return std::string(letter(std::get<0>(info.param))) + letter(std::get<1>(info.param)) + "_pad" +
         std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Ops, GemmTest,
                         ::testing::Combine(::testing::Values(Transpose::kNo, Transpose::kYes),
                                            ::testing::Values(Transpose::kNo, Transpose::kYes),
                                            ::testing::Values(int64_t{0}, int64_t{3})),
                         gemm_case_name);

TEST(GemmShapeTest, AcceptsTightAndPaddedLayouts) {
  EXPECT_TRUE(check_gemm_shape(Transpose::kNo, Transpose::kNo, 2, 3, 4, 4, 3, 3).ok());
  EXPECT_TRUE(check_gemm_shape(Transpose::kYes, Transpose::kYes, 2, 3, 4, 2, 4, 8).ok());
  EXPECT_TRUE(check_gemm_shape(Transpose::kNo, Transpose::kNo, 0, 3, 4, 4, 3, 3).ok());
}

TEST(GemmShapeTest, RejectsEachBadArgumentByName) {
  const auto message = [](Status s) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  };
  EXPECT_NE(
      message(check_gemm_shape(Transpose::kNo, Transpose::kNo, -1, 3, 4, 4, 3, 3)).find("m = -1"),
      std::string::npos);
  EXPECT_NE(
      message(check_gemm_shape(Transpose::kNo, Transpose::kNo, 2, 3, 0, 4, 3, 3)).find("k = 0"),
      std::string::npos);
  EXPECT_NE(
      message(check_gemm_shape(Transpose::kNo, Transpose::kNo, 2, 3, 4, 3, 3, 3)).find("lda = 3"),
      std::string::npos);
  EXPECT_NE(
      message(check_gemm_shape(Transpose::kYes, Transpose::kNo, 2, 3, 4, 1, 3, 3)).find("lda = 1"),
      std::string::npos);
  EXPECT_NE(
      message(check_gemm_shape(Transpose::kNo, Transpose::kYes, 2, 3, 4, 4, 3, 3)).find("ldb = 3"),
      std::string::npos);
  EXPECT_NE(
      message(check_gemm_shape(Transpose::kNo, Transpose::kNo, 2, 3, 4, 4, 3, 2)).find("ldc = 2"),
      std::string::npos);
}

}  // namespace
}  // namespace ms::ops
