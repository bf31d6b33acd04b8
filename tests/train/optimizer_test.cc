// AdamW and LAMB against values worked out by hand from the update rules in optimizer.h.
#include "train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ms::train {
namespace {

config::OptimConfig adamw_config() {
  config::OptimConfig c;
  c.name = config::OptimizerKind::kAdamW;
  c.betas = {0.9, 0.999};
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  return c;
}

Status no_reduce(std::span<double>) { return Status::OK(); }

std::unique_ptr<Optimizer> make(const config::OptimConfig& c, int64_t numel, size_t params) {
  Result<std::unique_ptr<Optimizer>> opt = Optimizer::create(c, numel, params);
  EXPECT_TRUE(opt.ok()) << opt.status().to_string();
  return std::move(*opt);
}

TEST(AdamW, FirstStepMovesEachWeightByLrTimesSignAfterDecay) {
  // Step 1: m = 0.1 g, v = 0.001 g^2, bias correction gives mhat = g, vhat = g^2, so the Adam
  // direction is g / (|g| + eps) = sign(g) (0 for g = 0). Decay first: w *= 1 - lr * wd.
  // w = [1, -2, 0.5], g = [0.1, -0.2, 0], lr = 0.1, wd = 0.1:
  //   [1 * 0.99 - 0.1, -2 * 0.99 + 0.1, 0.5 * 0.99] = [0.89, -1.88, 0.495].
  auto opt = make(adamw_config(), 3, 1);
  std::vector<float> w = {1.0f, -2.0f, 0.5f};
  const std::vector<float> g = {0.1f, -0.2f, 0.0f};
  const OptimSegment seg{0, 0, 3, true};
  ASSERT_TRUE(opt->step(w, g, {&seg, 1}, {0.1, 1.0}, no_reduce).ok());
  EXPECT_NEAR(w[0], 0.89, 1e-6);
  EXPECT_NEAR(w[1], -1.88, 1e-6);
  EXPECT_NEAR(w[2], 0.495, 1e-6);
  EXPECT_NEAR(opt->exp_avg()[1], -0.02, 1e-8);
  EXPECT_NEAR(opt->exp_avg_sq()[1], 0.001 * 0.04, 1e-10);
  EXPECT_EQ(opt->updates(), 1);
}

TEST(AdamW, SecondStepUsesBiasCorrectedMoments) {
  // w = 1, g = 0.1 then 0.3. After step 1: w = 0.89, m = 0.01, v = 1e-5.
  // Step 2: m = 0.9 * 0.01 + 0.1 * 0.3 = 0.039, v = 0.999e-5 + 0.001 * 0.09 = 9.999e-5,
  // mhat = 0.039 / 0.19 = 0.2052632, vhat = 9.999e-5 / 0.001999 = 0.0500200,
  // w = 0.89 * 0.99 - 0.1 * 0.2052632 / sqrt(0.0500200) = 0.8811 - 0.0917783 = 0.7893217.
  auto opt = make(adamw_config(), 1, 1);
  std::vector<float> w = {1.0f};
  const OptimSegment seg{0, 0, 1, true};
  std::vector<float> g = {0.1f};
  ASSERT_TRUE(opt->step(w, g, {&seg, 1}, {0.1, 1.0}, no_reduce).ok());
  g = {0.3f};
  ASSERT_TRUE(opt->step(w, g, {&seg, 1}, {0.1, 1.0}, no_reduce).ok());
  EXPECT_NEAR(w[0], 0.7893217, 2e-6);
}

TEST(AdamW, ExcludedParametersGetNoWeightDecay) {
  auto opt = make(adamw_config(), 1, 1);
  std::vector<float> w = {2.0f};
  const std::vector<float> g = {0.0f};
  const OptimSegment seg{0, 0, 1, false};
  ASSERT_TRUE(opt->step(w, g, {&seg, 1}, {0.1, 1.0}, no_reduce).ok());
  EXPECT_EQ(w[0], 2.0f);  // zero gradient, no decay: untouched
}

TEST(AdamW, GradScaleMultipliesTheGradientBeforeTheMoments) {
  auto opt = make(adamw_config(), 1, 1);
  std::vector<float> w = {0.0f};
  const std::vector<float> g = {4.0f};
  const OptimSegment seg{0, 0, 1, true};
  ASSERT_TRUE(opt->step(w, g, {&seg, 1}, {0.1, 0.25}, no_reduce).ok());
  EXPECT_NEAR(opt->exp_avg()[0], 0.1 * 1.0, 1e-7);  // m = (1 - beta1) * 4 * 0.25
}

TEST(AdamW, ElementsOutsideEverySegmentAreLeftAlone) {
  auto opt = make(adamw_config(), 4, 1);
  std::vector<float> w = {1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<float> g = {1.0f, 1.0f, 1.0f, 1.0f};
  const OptimSegment seg{0, 1, 2, true};
  ASSERT_TRUE(opt->step(w, g, {&seg, 1}, {0.1, 1.0}, no_reduce).ok());
  EXPECT_EQ(w[0], 1.0f);
  EXPECT_EQ(w[3], 1.0f);
  EXPECT_LT(w[1], 1.0f);
}

TEST(AdamW, RefusesBetasOfTheWrongLength) {
  config::OptimConfig c = adamw_config();
  c.betas = {0.9};
  Result<std::unique_ptr<Optimizer>> opt = Optimizer::create(c, 1, 1);
  ASSERT_FALSE(opt.ok());
  EXPECT_NE(opt.status().message().find("optim.betas"), std::string::npos);
}

config::OptimConfig lamb_config(double weight_decay) {
  config::OptimConfig c = adamw_config();
  c.name = config::OptimizerKind::kLamb;
  c.weight_decay = weight_decay;
  return c;
}

TEST(Lamb, ScalesTheStepByTheTrustRatio) {
  // w = [3, 4] (norm 5), g = [1, 1]: step 1's Adam direction is [1, 1] (norm sqrt 2). With
  // wd = 0 the trust ratio is 5 / sqrt(2), so w -= lr * 5 / sqrt(2) * [1, 1].
  auto opt = make(lamb_config(0.0), 2, 1);
  std::vector<float> w = {3.0f, 4.0f};
  const std::vector<float> g = {1.0f, 1.0f};
  const OptimSegment seg{0, 0, 2, true};
  ASSERT_TRUE(opt->step(w, g, {&seg, 1}, {0.01, 1.0}, no_reduce).ok());
  const double step = 0.01 * 5.0 / std::sqrt(2.0);
  EXPECT_NEAR(w[0], 3.0 - step, 1e-6);
  EXPECT_NEAR(w[1], 4.0 - step, 1e-6);
}

TEST(Lamb, WeightDecayJoinsTheDirectionBeforeTheTrustRatio) {
  // wd = 0.1: direction d = [1 + 0.3, 1 + 0.4] = [1.3, 1.4], ||d|| = sqrt(3.65), ratio 5/||d||.
  auto opt = make(lamb_config(0.1), 2, 1);
  std::vector<float> w = {3.0f, 4.0f};
  const std::vector<float> g = {1.0f, 1.0f};
  const OptimSegment seg{0, 0, 2, true};
  ASSERT_TRUE(opt->step(w, g, {&seg, 1}, {0.01, 1.0}, no_reduce).ok());
  const double ratio = 5.0 / std::sqrt(3.65);
  EXPECT_NEAR(w[0], 3.0 - 0.01 * ratio * 1.3, 1e-6);
  EXPECT_NEAR(w[1], 4.0 - 0.01 * ratio * 1.4, 1e-6);
}

TEST(Lamb, ZeroWeightsAndExcludedParametersUseRatioOne) {
  // Parameter 0 is all zeros (||w|| = 0): ratio 1. Parameter 1 is excluded from weight decay
  // (a norm weight): ratio 1 and no decay, so it moves by exactly lr * sign(g).
  auto opt = make(lamb_config(0.1), 3, 2);
  std::vector<float> w = {0.0f, 0.0f, 10.0f};
  const std::vector<float> g = {1.0f, -1.0f, 1.0f};
  const OptimSegment segs[] = {{0, 0, 2, true}, {1, 2, 1, false}};
  ASSERT_TRUE(opt->step(w, g, segs, {0.01, 1.0}, no_reduce).ok());
  EXPECT_NEAR(w[0], -0.01, 1e-7);
  EXPECT_NEAR(w[1], 0.01, 1e-7);
  EXPECT_NEAR(w[2], 10.0 - 0.01, 1e-6);
}

TEST(Lamb, NormsOfAParameterSplitIntoSegmentsAreSummed) {
  // The same parameter as one segment or as two (as a ZeRO split gives) updates identically.
  auto whole = make(lamb_config(0.1), 4, 1);
  auto split = make(lamb_config(0.1), 4, 1);
  std::vector<float> a = {1.0f, -2.0f, 3.0f, 0.5f}, b = a;
  const std::vector<float> g = {0.2f, 0.1f, -0.3f, 0.05f};
  const OptimSegment one{0, 0, 4, true};
  const OptimSegment two[] = {{0, 0, 1, true}, {0, 1, 3, true}};
  ASSERT_TRUE(whole->step(a, g, {&one, 1}, {0.01, 1.0}, no_reduce).ok());
  ASSERT_TRUE(split->step(b, g, two, {0.01, 1.0}, no_reduce).ok());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(a[i], b[i]);
}

TEST(Lamb, ReducerSeesTwoSumsPerParameterAndItsErrorStopsTheStep) {
  auto opt = make(lamb_config(0.0), 2, 1);
  std::vector<float> w = {3.0f, 4.0f};
  const std::vector<float> g = {1.0f, 1.0f};
  const OptimSegment seg{0, 0, 2, true};
  std::vector<double> seen;
  const Status s = opt->step(w, g, {&seg, 1}, {0.01, 1.0}, [&](std::span<double> sums) {
    seen.assign(sums.begin(), sums.end());
    return Unavailable("peer gone");
  });
  EXPECT_FALSE(s.ok());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_DOUBLE_EQ(seen[0], 25.0);  // ||w||^2
  EXPECT_NEAR(seen[1], 2.0, 1e-6);  // ||direction||^2
  EXPECT_EQ(w[0], 3.0f);
}

}  // namespace
}  // namespace ms::train
