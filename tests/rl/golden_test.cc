// lib/rl's losses and advantage estimators against values computed independently with PyTorch
// (tests/rl/golden/make_golden.py writes rl_golden.json; verl's formulas on padded tensors,
// autograd for the gradients).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "rl/advantage.h"
#include "rl/aggregation.h"
#include "rl/losses.h"

namespace ms::rl {
namespace {

using nlohmann::json;

constexpr double kTolerance = 1e-9;

const json& golden() {
  static const json data = [] {
    const char* root = std::getenv("MS_SOURCE_DIR");
    const std::string path =
        std::string(root ? root : MS_RL_TEST_SOURCE_DIR) + "/tests/rl/golden/rl_golden.json";
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::stringstream text;
    text << in.rdbuf();
    return json::parse(text.str());
  }();
  return data;
}

std::vector<double> doubles(const json& j) { return j.get<std::vector<double>>(); }

ResponseLayout layout() {
  const auto lengths = golden()["lengths"].get<std::vector<int64_t>>();
  return *ResponseLayout::from_lengths(lengths);
}

AggregationScope scope_for(const json& c) {
  AggregationScope scope;
  scope.mode = *parse_loss_aggregation(c["mode"].get<std::string>());
  scope.norm_length = golden()["norm_length"].get<double>();
  return scope;
}

void expect_near_all(const std::vector<double>& got, const json& want, const std::string& what) {
  const std::vector<double> expected = doubles(want);
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], expected[i], kTolerance * (1.0 + std::abs(expected[i])))
        << what << " [" << i << "]";
  }
}

TEST(RlGolden, ClippedPolicyLossEveryModeAndClip) {
  const json& g = golden();
  ASSERT_EQ(g["policy"].size(), 6u);
  bool dual_clip_seen = false;
  for (const json& c : g["policy"]) {
    const std::string label = c["mode"].get<std::string>() + " clip_high " + c["clip_high"].dump();
    PolicyClip clip{c["clip_low"].get<double>(), c["clip_high"].get<double>(),
                    c["dual"].get<double>()};
    Result<LossResult> r = clipped_policy_loss(layout(), doubles(g["log_probs"]),
                                               doubles(g["old_log_probs"]),
                                               doubles(g["advantages"]), clip, scope_for(c));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_NEAR(r->loss, c["loss"].get<double>(), kTolerance) << label;
    expect_near_all(r->gradient, c["gradient"], label + " gradient");
    EXPECT_NEAR(r->clip_fraction, c["clip_fraction"].get<double>(), kTolerance) << label;
    EXPECT_NEAR(r->dual_clip_fraction, c["dual_clip_fraction"].get<double>(), kTolerance) << label;
    EXPECT_NEAR(r->kl, c["kl"].get<double>(), kTolerance) << label;
    dual_clip_seen |= r->dual_clip_fraction > 0.0;
  }
  EXPECT_TRUE(dual_clip_seen) << "the golden batch must exercise the dual clip";
}

TEST(RlGolden, K3KlLossEveryMode) {
  const json& g = golden();
  for (const json& c : g["k3"]) {
    Result<LossResult> r = k3_kl_loss(layout(), doubles(g["log_probs"]), doubles(g["ref_log_probs"]),
                                      c["coef"].get<double>(), scope_for(c));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_NEAR(r->loss, c["loss"].get<double>(), kTolerance) << c["mode"];
    expect_near_all(r->gradient, c["gradient"], "k3 gradient " + c["mode"].get<std::string>());
    EXPECT_NEAR(r->kl, c["kl"].get<double>(), kTolerance) << c["mode"];
  }
}

TEST(RlGolden, ClippedValueLossEveryMode) {
  const json& g = golden();
  for (const json& c : g["value"]) {
    Result<LossResult> r = value_loss(layout(), doubles(g["values"]), doubles(g["old_values"]),
                                      doubles(g["returns"]), c["clip_range"].get<double>(),
                                      scope_for(c));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_NEAR(r->loss, c["loss"].get<double>(), kTolerance) << c["mode"];
    expect_near_all(r->gradient, c["gradient"], "value gradient " + c["mode"].get<std::string>());
    EXPECT_NEAR(r->clip_fraction, c["clip_fraction"].get<double>(), kTolerance) << c["mode"];
    EXPECT_GT(r->clip_fraction, 0.0);
  }
}

TEST(RlGolden, PositiveExampleNll) {
  const json& g = golden();
  const json& c = g["positive_nll"];
  Result<LossResult> r = positive_nll_loss(layout(), doubles(g["log_probs"]), doubles(g["positive"]),
                                           c["coef"].get<double>());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NEAR(r->loss, c["loss"].get<double>(), kTolerance);
  expect_near_all(r->gradient, c["gradient"], "positive nll gradient");
}

TEST(RlGolden, GroupNormalizedAdvantages) {
  for (const json& c : golden()["grpo"]) {
    GroupNormalization options{c["epsilon"].get<double>(), c["scale_by_std"].get<bool>()};
    Result<std::vector<double>> r = group_normalized_advantages(
        doubles(c["scores"]), c["group_size"].get<int64_t>(), options);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    expect_near_all(*r, c["advantages"], "grpo group " + c["group_size"].dump());
  }
}

TEST(RlGolden, GaeDecoupledGaeMonteCarloAndWhitening) {
  const json& g = golden()["gae"];
  const ResponseLayout l = layout();
  Result<AdvantagesAndReturns> r = gae(l, doubles(g["rewards"]), doubles(g["values"]),
                                       g["gamma"].get<double>(), doubles(g["lambdas"]));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_near_all(r->advantages, g["advantages"], "gae advantages");
  expect_near_all(r->returns, g["returns"], "gae returns");
  Result<std::vector<double>> white = whiten_tokens(r->advantages);
  ASSERT_TRUE(white.ok());
  expect_near_all(*white, g["whitened_advantages"], "whitened");

  const json& d = g["decoupled"];
  Result<AdvantagesAndReturns> dec =
      decoupled_gae(l, doubles(g["rewards"]), doubles(g["values"]), d["gamma"].get<double>(),
                    d["critic_lambda"].get<double>(), doubles(d["policy_lambdas"]));
  ASSERT_TRUE(dec.ok()) << dec.status().to_string();
  expect_near_all(dec->advantages, d["advantages"], "decoupled advantages");
  expect_near_all(dec->returns, d["returns"], "decoupled returns");

  Result<std::vector<double>> mc =
      monte_carlo_returns(l, doubles(g["rewards"]), g["monte_carlo_gamma"].get<double>());
  ASSERT_TRUE(mc.ok());
  expect_near_all(*mc, g["monte_carlo_returns"], "monte carlo");
  // With gamma = 1, lambda = 1 GAE's returns are the Monte-Carlo returns (VAPO's critic target).
  Result<std::vector<double>> mc1 = monte_carlo_returns(l, doubles(g["rewards"]), 1.0);
  ASSERT_TRUE(mc1.ok());
  expect_near_all(*mc1, g["monte_carlo_returns_gamma1"], "monte carlo gamma 1");
  expect_near_all(dec->returns, g["monte_carlo_returns_gamma1"], "critic returns = MC");
}

TEST(RlGolden, LengthAdaptiveLambda) {
  for (const json& c : golden()["length_adaptive_lambda"]) {
    EXPECT_NEAR(length_adaptive_lambda(c["length"].get<int64_t>(), c["alpha"].get<double>()),
                c["lambda"].get<double>(), 1e-15)
        << "length " << c["length"];
  }
}

TEST(RlAggregation, RejectsBadModesAndMissingNorm) {
  EXPECT_FALSE(parse_loss_aggregation("token-sum").ok());
  AggregationScope scope;
  scope.mode = LossAggregation::kSeqMeanTokenSumNorm;
  EXPECT_FALSE(aggregation_weights(layout(), scope).ok());
  scope.norm_length = 4.0;
  scope.data_parallel_size = 0;
  EXPECT_FALSE(aggregation_weights(layout(), scope).ok());
}

// Splitting a batch over two "ranks" with the global counts in the scope and the trainer's
// 1/dp average gives the gradient of the union batch, in every mode.
TEST(RlAggregation, TwoRankSplitEqualsUnionBatch) {
  const std::vector<int64_t> lengths = {4, 2, 3, 5};
  const ResponseLayout whole = *ResponseLayout::from_lengths(lengths);
  const ResponseLayout first = *ResponseLayout::from_lengths(std::span(lengths).first(2));
  const ResponseLayout second = *ResponseLayout::from_lengths(std::span(lengths).last(2));
  for (auto mode : {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean,
                    LossAggregation::kSeqMeanTokenSumNorm}) {
    AggregationScope one{mode, 0, 0, 7.0, 1};
    const std::vector<double> union_weights = *aggregation_weights(whole, one);
    AggregationScope split{mode, whole.num_tokens(), whole.num_responses(), 7.0, 2};
    std::vector<double> joined = *aggregation_weights(first, split);
    const std::vector<double> rest = *aggregation_weights(second, split);
    joined.insert(joined.end(), rest.begin(), rest.end());
    ASSERT_EQ(joined.size(), union_weights.size());
    for (size_t i = 0; i < joined.size(); ++i) {
      EXPECT_NEAR(joined[i] / 2.0, union_weights[i], 1e-15) << loss_aggregation_name(mode);
    }
  }
}

}  // namespace
}  // namespace ms::rl
