// Finite-difference checks of every loss's gradient on pseudo-random batches (not the golden
// ones) in every aggregation mode, with ratios spread across and beyond the clip range so each
// branch (unclipped, clipped on both sides, dual clip) is crossed.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "rl/losses.h"

namespace ms::rl {
namespace {

constexpr double kStep = 1e-6;

struct Batch {
  ResponseLayout layout;
  std::vector<double> log_probs, old_log_probs, ref_log_probs, advantages;
  std::vector<double> values, old_values, returns, positive;
};

Batch make_batch(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const std::vector<int64_t> lengths = {5, 1, 7, 3, 6};
  Batch b;
  b.layout = *ResponseLayout::from_lengths(lengths);
  const auto n = static_cast<size_t>(b.layout.num_tokens());
  for (size_t k = 0; k < n; ++k) {
    const double old = -0.2 - 3.0 * unit(rng);
    b.old_log_probs.push_back(old);
    b.log_probs.push_back(old + (unit(rng) - 0.5) * 3.0);  // ratios from 0.22 to 4.5
    b.ref_log_probs.push_back(old + (unit(rng) - 0.5));
    b.advantages.push_back((unit(rng) - 0.5) * 4.0);
    b.old_values.push_back(unit(rng) - 0.5);
    b.values.push_back(b.old_values.back() + (unit(rng) - 0.5) * 2.0);
    b.returns.push_back(unit(rng) * 2.0 - 1.0);
  }
  for (int64_t i = 0; i < b.layout.num_responses(); ++i) b.positive.push_back(i % 2 == 0);
  return b;
}

// True when `x` lies within `margin` of a kink of the piecewise loss, where a central
// difference straddles two branches.
bool near(double x, std::initializer_list<double> kinks, double margin = 1e-4) {
  for (double k : kinks) {
    if (std::abs(x - k) < margin) return true;
  }
  return false;
}

void check_gradient(const std::function<LossResult(const std::vector<double>&)>& loss_of,
                    std::vector<double> input, const std::function<bool(size_t, double)>& at_kink,
                    const char* what) {
  const LossResult base = loss_of(input);
  int checked = 0;
  for (size_t k = 0; k < input.size(); ++k) {
    if (at_kink(k, input[k])) continue;
    const double saved = input[k];
    input[k] = saved + kStep;
    const double up = loss_of(input).loss;
    input[k] = saved - kStep;
    const double down = loss_of(input).loss;
    input[k] = saved;
    const double numeric = (up - down) / (2.0 * kStep);
    EXPECT_NEAR(base.gradient[k], numeric, 1e-6 * (1.0 + std::abs(numeric)))
        << what << " token " << k;
    ++checked;
  }
  EXPECT_GT(checked, static_cast<int>(input.size()) - 3) << what << ": too many tokens skipped";
}

class GradientCheck : public ::testing::TestWithParam<LossAggregation> {
 protected:
  AggregationScope scope() const { return AggregationScope{GetParam(), 0, 0, 8.0, 1}; }
};

TEST_P(GradientCheck, ClippedPolicyLoss) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const Batch b = make_batch(seed);
    const PolicyClip clip{0.2, 0.28, 3.0};
    auto loss_of = [&](const std::vector<double>& lp) {
      return *clipped_policy_loss(b.layout, lp, b.old_log_probs, b.advantages, clip, scope());
    };
    auto at_kink = [&](size_t k, double lp) {
      const double ratio = std::exp(lp - b.old_log_probs[k]);
      return near(ratio, {0.8, 1.28, 3.0});
    };
    check_gradient(loss_of, b.log_probs, at_kink, "policy");
    const LossResult r = loss_of(b.log_probs);
    EXPECT_GT(r.clip_fraction, 0.0);
    EXPECT_GT(r.dual_clip_fraction, 0.0) << "seed " << seed << " never reaches the dual clip";
  }
}

TEST_P(GradientCheck, K3Kl) {
  const Batch b = make_batch(4);
  auto loss_of = [&](const std::vector<double>& lp) {
    return *k3_kl_loss(b.layout, lp, b.ref_log_probs, 0.05, scope());
  };
  check_gradient(loss_of, b.log_probs, [](size_t, double) { return false; }, "k3");
}

TEST_P(GradientCheck, ValueLoss) {
  const Batch b = make_batch(5);
  auto loss_of = [&](const std::vector<double>& v) {
    return *value_loss(b.layout, v, b.old_values, b.returns, 0.3, scope());
  };
  auto at_kink = [&](size_t k, double v) {
    // The clip edges, and where the clipped and plain errors are equal.
    const double lo = b.old_values[k] - 0.3;
    const double hi = b.old_values[k] + 0.3;
    const double held = std::clamp(v, lo, hi);
    return near(v, {lo, hi}) ||
           (held != v && near(std::abs(v - b.returns[k]), {std::abs(held - b.returns[k])}));
  };
  check_gradient(loss_of, b.values, at_kink, "value");
}

TEST_P(GradientCheck, PositiveNll) {
  const Batch b = make_batch(6);
  auto loss_of = [&](const std::vector<double>& lp) {
    return *positive_nll_loss(b.layout, lp, b.positive, 0.1);
  };
  check_gradient(loss_of, b.log_probs, [](size_t, double) { return false; }, "positive nll");
}

INSTANTIATE_TEST_SUITE_P(Modes, GradientCheck,
                         ::testing::Values(LossAggregation::kTokenMean,
                                           LossAggregation::kSeqMeanTokenMean,
                                           LossAggregation::kSeqMeanTokenSumNorm),
                         [](const auto& info) {
                           std::string name(loss_aggregation_name(info.param));
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST(PolicyLoss, RejectsBadClipsAndMismatchedSizes) {
  const Batch b = make_batch(7);
  const AggregationScope scope{};
  EXPECT_FALSE(clipped_policy_loss(b.layout, b.log_probs, b.old_log_probs, b.advantages,
                                   PolicyClip{0.2, 0.28, 1.0}, scope).ok());
  EXPECT_FALSE(clipped_policy_loss(b.layout, b.log_probs, b.old_log_probs, b.advantages,
                                   PolicyClip{1.2, 0.28, 3.0}, scope).ok());
  std::vector<double> short_adv(b.advantages.begin(), b.advantages.end() - 1);
  Result<LossResult> r = clipped_policy_loss(b.layout, b.log_probs, b.old_log_probs, short_adv,
                                             PolicyClip{}, scope);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("advantages"), std::string::npos);
  // The dual clip off: no token is bound by it.
  Result<LossResult> off = clipped_policy_loss(b.layout, b.log_probs, b.old_log_probs,
                                               b.advantages, PolicyClip{0.2, 0.28, 0.0}, scope);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->dual_clip_fraction, 0.0);
}

}  // namespace
}  // namespace ms::rl
