// Auxiliary-loss-free balancing (ops/moe.h): the bias chooses the experts but not their
// weights, and its update is Megatron-LM's get_updated_expert_bias rule,
// bias + rate * sign(mean(counts) - counts), pinned here on hand-computed cases.
#include <gtest/gtest.h>

#include <vector>

#include "ops/moe.h"

namespace ms::ops {
namespace {

TEST(MoeExpertBias, ChoosesByBiasedScoresWeighsByProbabilities) {
  // 2 tokens, 3 experts, top-2. Unbiased: token 0 picks {0, 1}, token 1 picks {2, 0}.
  const std::vector<float> p = {0.5f, 0.3f, 0.2f, 0.35f, 0.15f, 0.5f};
  const std::vector<float> bias = {-0.4f, 0.0f, 0.2f};
  std::vector<float> w(4), w_plain(4);
  const MoeRouting plain = moe_route(p.data(), w_plain.data(), 2, 3, 2);
  EXPECT_EQ(plain.expert, (std::vector<int32_t>{0, 1, 2, 0}));
  // Biased scores: token 0 {0.1, 0.3, 0.4} -> {2, 1}; token 1 {-0.05, 0.15, 0.7} -> {2, 1}.
  const MoeRouting r = moe_route(p.data(), w.data(), 2, 3, 2, bias.data());
  EXPECT_EQ(r.expert, (std::vector<int32_t>{2, 1, 2, 1}));
  EXPECT_EQ(r.routed, (std::vector<int64_t>{0, 2, 2}));
  // The weights are the chosen probabilities renormalized, the bias left out.
  EXPECT_FLOAT_EQ(w[0], 0.2f / 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.3f / 0.5f);
  EXPECT_FLOAT_EQ(w[2], 0.5f / 0.65f);
  EXPECT_FLOAT_EQ(w[3], 0.15f / 0.65f);
}

TEST(MoeExpertBias, ZeroBiasRoutesAsNone) {
  const std::vector<float> p = {0.1f, 0.6f, 0.3f, 0.4f, 0.4f, 0.2f};
  const std::vector<float> zero(3, 0.0f);
  std::vector<float> a(2), b(2);
  EXPECT_EQ(moe_route(p.data(), a.data(), 2, 3, 1).expert,
            moe_route(p.data(), b.data(), 2, 3, 1, zero.data()).expert);
  EXPECT_EQ(a, b);
}

TEST(MoeExpertBias, UpdateIsSignOfTheDistanceToTheMean) {
  // mean = 6: expert 0 overloaded (down), 1 at the mean (unchanged), 2 and 3 underloaded (up).
  const std::vector<int64_t> counts = {12, 6, 4, 2};
  std::vector<float> bias = {0.5f, -0.25f, 0.0f, 1.0f};
  moe_update_expert_bias(counts.data(), bias.data(), 4, 0.125);
  EXPECT_EQ(bias, (std::vector<float>{0.375f, -0.25f, 0.125f, 1.125f}));
  // A fractional mean: counts {1, 2}, mean 1.5.
  const std::vector<int64_t> two = {1, 2};
  std::vector<float> b2 = {0.0f, 0.0f};
  moe_update_expert_bias(two.data(), b2.data(), 2, 1e-3);
  EXPECT_FLOAT_EQ(b2[0], 1e-3f);
  EXPECT_FLOAT_EQ(b2[1], -1e-3f);
}

}  // namespace
}  // namespace ms::ops
