// The accept/reject rule of speculative decoding (infer/speculative.h) on hand-made target and
// draft distributions: whatever the draft's q, the emitted token must be distributed as the
// target's p. Each case runs 200,000 seeded trials (draft token drawn from q, then the rule)
// and compares the histogram with p by Pearson's chi-square at a false-alarm rate of 1e-4; a
// token p gives no mass must never appear. A deliberately wrong rule (keep every draft token)
// must fail the same check, so the check has the power to see a biased rule.
#include "infer/speculative.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/philox.h"

namespace ms::infer {
namespace {

using Dist = std::vector<double>;
using Rule = std::function<int32_t(const Dist& p, const Dist& q, int32_t x, double ua, double ur)>;

constexpr int64_t kTrials = 200000;

// The chi-square value a statistic with `df` degrees of freedom exceeds with probability 1e-4
// (Wilson-Hilferty; within 1% of the exact quantile for df >= 1 at this level).
double chi_square_bound(int64_t df) {
  const double z = 3.719;  // standard normal upper 1e-4 quantile
  const double d = static_cast<double>(df);
  return d * std::pow(1.0 - 2.0 / (9.0 * d) + z * std::sqrt(2.0 / (9.0 * d)), 3.0);
}

std::vector<int64_t> histogram(const Dist& p, const Dist& q, const Rule& rule, uint64_t seed) {
  std::vector<int64_t> counts(p.size(), 0);
  const uint64_t stream = stream_id("tests.infer.speculative_rule");
  for (int64_t i = 0; i < kTrials; ++i) {
    const uint64_t at = 3 * static_cast<uint64_t>(i);
    const int32_t x = sample_distribution(q, uniform(seed, stream, at));
    ++counts[static_cast<size_t>(rule(p, q, x, uniform(seed, stream, at + 1),
                                      uniform(seed, stream, at + 2)))];
  }
  return counts;
}

// Pearson's statistic over the tokens p gives mass, and its degrees of freedom.
std::pair<double, int64_t> chi_square(const std::vector<int64_t>& counts, const Dist& p) {
  double stat = 0;
  int64_t cells = 0;
  for (size_t t = 0; t < p.size(); ++t) {
    if (p[t] <= 0) continue;
    const double expected = p[t] * static_cast<double>(kTrials);
    const double diff = static_cast<double>(counts[t]) - expected;
    stat += diff * diff / expected;
    ++cells;
  }
  return {stat, cells - 1};
}

// Whether the rule's output over kTrials looks distributed as p.
::testing::AssertionResult follows(const Dist& p, const Dist& q, const Rule& rule) {
  const std::vector<int64_t> counts = histogram(p, q, rule, 2024);
  for (size_t t = 0; t < p.size(); ++t) {
    if (p[t] <= 0 && counts[t] > 0) {
      return ::testing::AssertionFailure() << "token " << t << " has p = 0 but came out "
                                           << counts[t] << " times";
    }
  }
  const auto [stat, df] = chi_square(counts, p);
  if (df > 0 && stat > chi_square_bound(df)) {
    return ::testing::AssertionFailure()
           << "chi-square " << stat << " over " << df << " dof exceeds " << chi_square_bound(df);
  }
  return ::testing::AssertionSuccess() << "chi-square " << stat << " over " << df << " dof";
}

int32_t the_rule(const Dist& p, const Dist& q, int32_t x, double ua, double ur) {
  return verify_draft_token(p, q, x, ua, ur).token;
}

struct Case {
  const char* name;
  Dist p, q;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"q puts mass where p has none", {0.5, 0.2, 0.2, 0.1, 0.0}, {0.1, 0.1, 0.2, 0.3, 0.3}},
      {"q misses tokens p needs", {0.25, 0.25, 0.25, 0.25, 0.0}, {0.6, 0.4, 0.0, 0.0, 0.0}},
      {"disjoint supports", {0.0, 0.0, 0.7, 0.3, 0.0}, {0.5, 0.5, 0.0, 0.0, 0.0}},
      {"p one-hot, q uniform", {0.0, 0.0, 0.0, 1.0, 0.0}, {0.2, 0.2, 0.2, 0.2, 0.2}},
      {"p equals q", {0.4, 0.3, 0.2, 0.1, 0.0}, {0.4, 0.3, 0.2, 0.1, 0.0}},
      {"close but not equal", {0.30, 0.30, 0.20, 0.15, 0.05}, {0.28, 0.32, 0.21, 0.14, 0.05}},
  };
  return all;
}

TEST(SpeculativeRule, OutputFollowsTheTargetDistributionWhateverTheDraft) {
  for (const Case& c : cases()) EXPECT_TRUE(follows(c.p, c.q, the_rule)) << c.name;
}

TEST(SpeculativeRule, KeepingEveryDraftTokenFailsTheSameCheck) {
  const Rule keep_draft = [](const Dist&, const Dist&, int32_t x, double, double) { return x; };
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_FALSE(follows(cases()[i].p, cases()[i].q, keep_draft)) << cases()[i].name;
  }
  // Resampling from p instead of from the residual max(0, p - q) is biased too.
  const Rule resample_from_p = [](const Dist& p, const Dist& q, int32_t x, double ua, double ur) {
    const size_t i = static_cast<size_t>(x);
    return ua * q[i] < p[i] ? x : sample_distribution(p, ur);
  };
  EXPECT_FALSE(follows(cases()[0].p, cases()[0].q, resample_from_p));
}

TEST(SpeculativeRule, AcceptsWithProbabilityMinOfOneAndTheRatio) {
  const Dist p = {0.5, 0.2, 0.3}, q = {0.25, 0.4, 0.35};
  // p(0) >= q(0): always kept.
  for (double u : {0.0, 0.5, 0.999}) EXPECT_TRUE(verify_draft_token(p, q, 0, u, 0.5).accepted);
  // p(1)/q(1) = 0.5: kept below u = 0.5 only, and then replaced from the residual
  // max(0, p - q) = {0.25, 0, 0}, i.e. by token 0.
  EXPECT_TRUE(verify_draft_token(p, q, 1, 0.49, 0.5).accepted);
  const DraftVerdict rejected = verify_draft_token(p, q, 1, 0.51, 0.9);
  EXPECT_FALSE(rejected.accepted);
  EXPECT_EQ(rejected.token, 0);
}

TEST(SpeculativeRule, DistributionsAreThoseTheSamplerDrawsFrom) {
  const float logits[] = {2.0f, 1.0f, 0.5f, -1.0f, 3.0f};
  const Dist all = token_distribution(logits, 5, {0.7, 0, 1.0, 0});
  double sum = 0;
  for (int t = 0; t < 5; ++t) {
    sum += all[static_cast<size_t>(t)];
    EXPECT_NEAR(all[static_cast<size_t>(t)] / all[4], std::exp((logits[t] - 3.0) / 0.7), 1e-12);
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  // top-k 2 keeps ids 4 and 0, renormalized; top-p then cuts the nucleus.
  const Dist top2 = token_distribution(logits, 5, {1.0, 2, 1.0, 0});
  EXPECT_NEAR(top2[4] + top2[0], 1.0, 1e-12);
  EXPECT_NEAR(top2[4] / top2[0], std::exp(1.0), 1e-9);
  const Dist nucleus = token_distribution(logits, 5, {1.0, 0, 0.5, 0});
  EXPECT_EQ(nucleus[4], 1.0);
  // Every token the sampler draws has mass under the distribution.
  for (int64_t i = 0; i < 200; ++i) {
    const SamplingParams params{1.3, 3, 0.8, 11};
    const Dist d = token_distribution(logits, 5, params);
    EXPECT_GT(d[static_cast<size_t>(sample_token(logits, 5, params, i))], 0.0);
  }
}

// sample_token, with and without a cut (the uncut path skips the sort), draws from
// token_distribution: the rule's p is what the target alone samples from.
TEST(SpeculativeRule, TheSamplerDrawsFromTheTokenDistribution) {
  const float logits[] = {0.3f, -0.2f, 1.1f, 0.0f, 0.7f, -1.5f};
  for (const SamplingParams& params :
       {SamplingParams{0.9, 0, 1.0, 5}, SamplingParams{1.2, 4, 0.9, 6}}) {
    const Dist p = token_distribution(logits, 6, params);
    std::vector<int64_t> counts(6, 0);
    for (int64_t i = 0; i < kTrials; ++i) ++counts[sample_token(logits, 6, params, i)];
    for (size_t t = 0; t < 6; ++t) {
      if (p[t] == 0) {
        EXPECT_EQ(counts[t], 0) << t;
      }
    }
    const auto [stat, df] = chi_square(counts, p);
    EXPECT_LT(stat, chi_square_bound(df)) << "top_k " << params.top_k;
  }
}

}  // namespace
}  // namespace ms::infer
