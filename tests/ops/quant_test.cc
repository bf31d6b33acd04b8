// The serving weight formats (ops/quant.h) as a specification: exact codes and scales on small
// hand-made matrices, the error bound of each format on random ones (half a step of the scale,
// half a bf16 ulp), and refusal, by name, of shapes and values the formats cannot hold.
#include "ops/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "tests/ops/guarded.h"

namespace ms::ops {
namespace {

std::vector<float> dequantized(const QuantizedMatrix& q) {
  test::Guarded<float> out(static_cast<size_t>(q.rows * q.cols));
  dequantize_weights(q.view(), out.data());
  EXPECT_TRUE(out.guards_intact()) << "dequantize wrote outside its output";
  return {out.data(), out.data() + out.size()};
}

QuantizedMatrix quantized(const std::vector<float>& w, int64_t rows, WeightFormat f,
                          int64_t group = kDefaultInt4GroupSize) {
  Result<QuantizedMatrix> q =
      quantize_weights(w.data(), rows, static_cast<int64_t>(w.size()) / rows, f, group);
  EXPECT_TRUE(q.ok()) << q.status().to_string();
  return q.ok() ? std::move(q).value() : QuantizedMatrix{};
}

TEST(QuantFormatTest, NamesRoundTripAndUnknownNamesAreRefused) {
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kInt8,
                         WeightFormat::kInt4}) {
    Result<WeightFormat> parsed = parse_weight_format(weight_format_name(f));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, f);
  }
  const Result<WeightFormat> bad = parse_weight_format("int3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'int3'"), std::string::npos) << bad.status().message();
}

TEST(QuantFormatTest, Int8ScalesEachRowByItsMaximumAndRoundsTiesToEven) {
  // Row 0: max 127, scale 1. Row 1: max 254, scale 2; 3 / 2 = 1.5 rounds to 2, 0.9 / 2 to 0.
  // Row 2: all zero, scale 0 and codes 0.
  const std::vector<float> w = {127, -64, 1.4f, 0, -254, 3, 0.9f, 1.1f, 0, 0, 0, 0};
  const QuantizedMatrix q = quantized(w, 3, WeightFormat::kInt8);
  EXPECT_EQ(q.scales, (HugePageVector<float>{1, 2, 0}));
  std::vector<int> codes;
  for (uint8_t b : q.values) codes.push_back(static_cast<int8_t>(b));
  EXPECT_EQ(codes, (std::vector<int>{127, -64, 1, 0, -127, 2, 0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(dequantized(q), (std::vector<float>{127, -64, 1, 0, -254, 4, 0, 2, 0, 0, 0, 0}));
  EXPECT_EQ(q.bytes(), 12 + 3 * 4);
}

TEST(QuantFormatTest, Int4PacksTwoCodesPerByteLowNibbleFirst) {
  // One group of 32 whose maximum is 7 (scale 1): the codes are the values themselves.
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i) w[i] = static_cast<float>(i % 15 - 7);
  const QuantizedMatrix q = quantized(w, 1, WeightFormat::kInt4, 32);
  ASSERT_EQ(q.values.size(), 16u);
  EXPECT_EQ(q.scales, (HugePageVector<float>{1}));
  EXPECT_EQ(q.values[0], 0x21);  // columns 0, 1: -7 + 8 = 1 low, -6 + 8 = 2 high
  EXPECT_EQ(q.values[7], 0x1f);  // columns 14, 15: 7 + 8 = 15 low, -7 + 8 = 1 high
  for (int c = 0; c < 32; ++c) EXPECT_EQ(int4_code(q.values.data(), c), c % 15 - 7) << c;
  EXPECT_EQ(dequantized(q), w);
}

TEST(QuantFormatTest, Int4GroupsHaveTheirOwnScales) {
  // Two groups of 32: the first's maximum is 14 (scale 2; 3 / 2 = 1.5 rounds to 2), the
  // second's is 0.7 (scale 0.1).
  std::vector<float> w(64, 0.0f);
  w[0] = 14;
  w[1] = 3;
  w[2] = -14;
  w[32] = 0.7f;
  const QuantizedMatrix q = quantized(w, 1, WeightFormat::kInt4, 32);
  ASSERT_EQ(q.scales.size(), 2u);
  EXPECT_EQ(q.scales[0], 2.0f);
  EXPECT_EQ(q.scales[1], 0.7f / 7.0f);
  EXPECT_EQ(int4_code(q.values.data(), 0), 7);
  EXPECT_EQ(int4_code(q.values.data(), 1), 2);
  EXPECT_EQ(int4_code(q.values.data(), 2), -7);
  EXPECT_EQ(int4_code(q.values.data(), 3), 0);
  EXPECT_EQ(int4_code(q.values.data(), 32), 7);
  EXPECT_EQ(q.bytes(), 32 + 2 * 4);
}

TEST(QuantFormatTest, Bf16RoundsToNearestEven) {
  const std::vector<float> w = {1.0f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, -2.5f};
  const QuantizedMatrix q = quantized(w, 1, WeightFormat::kBF16);
  EXPECT_EQ(dequantized(q), (std::vector<float>{1.0f, 1.0f, 1.0f + 0x1p-6f, -2.5f}));
  EXPECT_EQ(q.bytes(), 8);
  EXPECT_TRUE(q.scales.empty());
}

TEST(QuantFormatTest, F32IsKeptExactly) {
  const std::vector<float> w = {0.1f, -3e-20f, 7.0f, 1e30f};
  EXPECT_EQ(dequantized(quantized(w, 2, WeightFormat::kF32)), w);
}

// Round trips on random weights: every weight is within half a quantization step of the
// original (plus float rounding of the product), bf16 within half an ulp (2^-8 relative).
struct RoundTripCase {
  const char* name;
  WeightFormat format;
  int64_t group;
  int64_t rows, cols;
};
void PrintTo(const RoundTripCase& c, std::ostream* os) { *os << c.name; }

const RoundTripCase kRoundTripCases[] = {
    {"bf16", WeightFormat::kBF16, 0, 7, 33},
    {"int8", WeightFormat::kInt8, 0, 9, 100},
    {"int4_g32", WeightFormat::kInt4, 32, 5, 96},
    {"int4_g64", WeightFormat::kInt4, 64, 5, 192},
    {"int4_g128", WeightFormat::kInt4, 128, 3, 256},
};

class QuantRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

// The largest |w| of the block weight (r, c) shares a scale with, divided by the code range.
double step_of(const RoundTripCase& t, const std::vector<float>& w, int64_t r, int64_t c) {
  const int64_t span = t.format == WeightFormat::kInt4 ? t.group : t.cols;
  const int64_t start = c / span * span;
  double m = 0;
  for (int64_t i = start; i < start + span; ++i) {
    m = std::max(m, std::fabs(double{w[r * t.cols + i]}));
  }
  return m / (t.format == WeightFormat::kInt4 ? 7.0 : 127.0);
}

TEST_P(QuantRoundTripTest, ErrorIsWithinHalfAStep) {
  const RoundTripCase& t = GetParam();
  std::mt19937_64 rng(17);
  std::vector<float> w = test::random_floats(static_cast<size_t>(t.rows * t.cols), rng, -2, 2);
  w[3] = 0;  // zeros stay zero
  const QuantizedMatrix q = quantized(w, t.rows, t.format, t.group);
  ASSERT_EQ(q.bytes(), value_bytes(t.format, t.rows, t.cols) +
                           4 * scale_count(t.format, t.rows, t.cols, q.group_size));
  const std::vector<float> back = dequantized(q);
  for (int64_t r = 0; r < t.rows; ++r) {
    for (int64_t c = 0; c < t.cols; ++c) {
      const double orig = w[r * t.cols + c], got = back[r * t.cols + c];
      const double bound = t.format == WeightFormat::kBF16
                                ? std::fabs(orig) * 0x1p-8
                                : step_of(t, w, r, c) * (0.5 + 1e-6);
      ASSERT_LE(std::fabs(got - orig), bound) << t.name << " (" << r << ", " << c << ")";
    }
  }
  EXPECT_EQ(back[3], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Ops, QuantRoundTripTest, ::testing::ValuesIn(kRoundTripCases),
                         [](const auto& info) { return std::string(info.param.name); });

void expect_refused(const Status& s, const std::string& names) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(names), std::string::npos) << s.message();
}

TEST(QuantFormatTest, RefusesBadShapesAndGroupSizesByName) {
  expect_refused(check_quantize_shape(WeightFormat::kInt4, 4, 96, 48), "group size 48");
  expect_refused(check_quantize_shape(WeightFormat::kInt4, 4, 96, 64), "cols 96");
  expect_refused(check_quantize_shape(WeightFormat::kInt8, 0, 16, 0), "(0, 16)");
  expect_refused(check_quantize_shape(WeightFormat::kBF16, 3, -1, 0), "(3, -1)");
  EXPECT_TRUE(check_quantize_shape(WeightFormat::kInt4, 4, 96, 32).ok());
  EXPECT_TRUE(check_quantize_shape(WeightFormat::kInt8, 4, 97, 48).ok());  // group unused
  const std::vector<float> w(96, 1.0f);
  expect_refused(quantize_weights(w.data(), 1, 96, WeightFormat::kInt4, 48).status(), "48");
}

TEST(QuantFormatTest, RefusesNonFiniteWeightsNamingTheElement) {
  std::vector<float> w(64, 0.5f);
  w[1 * 32 + 5] = std::numeric_limits<float>::quiet_NaN();
  expect_refused(quantize_weights(w.data(), 2, 32, WeightFormat::kInt8).status(),
                 "row 1, col 5");
  w[1 * 32 + 5] = std::numeric_limits<float>::infinity();
  expect_refused(quantize_weights(w.data(), 2, 32, WeightFormat::kInt4, 32).status(),
                 "row 1, col 5");
}

}  // namespace
}  // namespace ms::ops
