// Context parallelism in the planner: the search offers cp layouts the trainer accepts, the
// ring's bytes and exposed time, memory at T / cp tokens and ZeRO over dp x cp, and cp chosen
// when a long sequence does not fit otherwise.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/transformer.h"
#include "plan/search.h"
#include "plan_fixtures.h"
#include "train/run_checks.h"

namespace ms::plan {
namespace {

using fixtures::small_model;
using fixtures::test_cluster;

Layout cp_layout(int dp, int cp, int64_t micro_batch) {
  Layout l;
  l.dp = dp;
  l.cp = cp;
  l.micro_batch = micro_batch;
  return l;
}

TEST(PlanCp, SearchOffersCpLayoutsTheTrainerAccepts) {
  const config::RunConfig c = small_model();
  bool saw_cp = false, saw_cp_dp = false;
  for (const Layout& l : candidate_layouts(c, 4)) {
    Result<int> dp = train::data_parallel_size(apply_layout(c, l), 4);
    ASSERT_TRUE(dp.ok()) << layout_name(l) << ": " << dp.status().to_string();
    EXPECT_EQ(*dp, l.dp);
    EXPECT_EQ(l.dp * l.cp * l.tp * l.pp, 4);
    EXPECT_EQ(c.train.seq_len % (2 * l.cp), 0);
    saw_cp |= l.cp > 1;
    saw_cp_dp |= l.cp == 2 && l.dp == 2;
    if (l.cp > 1) {
      EXPECT_NE(layout_name(l).find(" cp" + std::to_string(l.cp)), std::string::npos);
      const std::vector<std::string> flags = set_flags(l);
      EXPECT_NE(std::find(flags.begin(), flags.end(), "parallel.cp=" + std::to_string(l.cp)),
                flags.end());
    }
  }
  EXPECT_TRUE(saw_cp && saw_cp_dp);
  // A sequence that 2 cp chunks do not divide, and a capacity factor, get no cp layout.
  config::RunConfig odd = c;
  odd.train.seq_len = 126;  // 2 x 63: cp 2 needs 4 | 126
  for (const Layout& l : candidate_layouts(odd, 4)) EXPECT_EQ(l.cp, 1) << layout_name(l);
  EXPECT_FALSE(check_layout(odd, cp_layout(2, 2, 4), 4).ok());
  config::RunConfig moe = c;
  moe.model.moe.num_experts = 4;
  moe.model.moe.capacity_factor = 1.25;
  for (const Layout& l : candidate_layouts(moe, 4)) EXPECT_EQ(l.cp, 1) << layout_name(l);
}

TEST(PlanCp, ExpertParallelismFoldsOverDpTimesCp) {
  config::RunConfig c = small_model();
  c.model.moe.num_experts = 4;
  bool saw = false;
  for (const Layout& l : candidate_layouts(c, 4)) {
    EXPECT_EQ((l.dp * l.cp) % l.ep, 0) << layout_name(l);
    saw |= l.cp == 2 && l.dp == 1 && l.ep == 2;
  }
  EXPECT_TRUE(saw);
}

TEST(PlanCp, RingBytesAreTheKeyValueAndGradientHops) {
  const config::RunConfig c = small_model();
  const Cluster cl = test_cluster(2, 64, 1, 5);
  Result<Prediction> p = predict_layout(cl, c, cp_layout(1, 2, 4), 2);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  // One hop: K and V of B x T/cp tokens x kv_heads x head_dim f32 = 2 x 4 x 64 x 4 x 32 x 4.
  const double hop = 2.0 * 4 * 64 * 4 * 32 * 4;
  // Per layer and micro-batch: cp - 1 forward, cp - 1 key/value and cp dK/dV backward hops;
  // 4 layers, 16 / 4 = 4 micro-batches.
  EXPECT_DOUBLE_EQ(p->cp.bytes, hop * (1 + 1 + 2) * 4 * 4);
  const CostModel cost(cl, 2);
  EXPECT_NEAR(p->cp.seconds, cost.comm_seconds(Collective::kP2P, hop, 2, false) * 4 * 4 * 4,
              1e-12);
  Result<Prediction> none = predict_layout(cl, c, cp_layout(2, 1, 4), 2);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->cp.bytes, 0);
}

TEST(PlanCp, ComputeSplitsLikeDataParallelismAndSlowLinksExposeTheGradientHops) {
  const config::RunConfig c = small_model();
  // Nearly free links: cp 2 does the work of dp 2 (half the GEMM rows per rank, 1/cp of the
  // causal attention over the whole sequence), so the two steps are close.
  const Cluster fast = test_cluster(2, 64, 1e6, 0);
  Result<Prediction> cp = predict_layout(fast, c, cp_layout(1, 2, 4), 2);
  Result<Prediction> dp = predict_layout(fast, c, cp_layout(2, 1, 4), 2);
  ASSERT_TRUE(cp.ok() && dp.ok());
  EXPECT_NEAR(cp->compute_s / dp->compute_s, 1.0, 0.15);
  // A slow link: at least the cp dK/dV hops per layer and micro-batch are exposed.
  const Cluster slow = test_cluster(2, 64, 0.01, 2000);
  Result<Prediction> cp_slow = predict_layout(slow, c, cp_layout(1, 2, 4), 2);
  ASSERT_TRUE(cp_slow.ok());
  const double hop_s = CostModel(slow, 2).comm_seconds(Collective::kP2P, 2.0 * 4 * 64 * 4 * 32 * 4,
                                                       2, false);
  EXPECT_GE(cp_slow->compute_s - cp->compute_s, 0.99 * 2 * hop_s * 4 * 4);
  // ... and no more than every hop on the wire.
  EXPECT_LE(cp_slow->compute_s - cp->compute_s, cp_slow->cp.seconds * 1.01);
}

TEST(PlanCp, MemoryHoldsTOverCpTokensAndShardsOverDpTimesCp) {
  const config::RunConfig c = small_model();
  const Cluster cl = test_cluster(2, 64, 1, 5);
  Result<Prediction> cp = predict_layout(cl, c, cp_layout(1, 2, 4), 2);
  Result<Prediction> dp = predict_layout(cl, c, cp_layout(2, 1, 4), 2);
  Result<Prediction> one = predict_layout(cl, c, cp_layout(1, 1, 4), 1);
  ASSERT_TRUE(cp.ok() && dp.ok() && one.ok());
  // ZeRO-1 shards the optimizer state over dp x cp: cp 2 as dp 2, half of one rank's.
  EXPECT_DOUBLE_EQ(cp->peak.optimizer_mib, dp->peak.optimizer_mib);
  EXPECT_DOUBLE_EQ(cp->peak.gradients_mib, dp->peak.gradients_mib);
  EXPECT_LT(cp->peak.optimizer_mib, one->peak.optimizer_mib);
  // Activations are the model's figure at T / cp tokens.
  const config::ModelConfig& m = c.model;
  model::ActivationDims dims{.tp = 1,
                             .sequence_parallel = true,
                             .heads = m.n_heads,
                             .kv_heads = m.n_kv_heads,
                             .d_ff = m.d_ff,
                             .shared_d_ff = 0,
                             .vocab_rows = m.vocab_size,
                             .recompute = config::Recompute::kNone,
                             .layers = m.n_layers,
                             .last_chunk = true};
  EXPECT_NEAR(cp->peak.activations_mib * 1024 * 1024,
              static_cast<double>(model::activation_bytes_of(m, dims, 4, 64)), 1.0);
  EXPECT_LT(cp->peak.activations_mib, one->peak.activations_mib);
}

TEST(PlanCp, ALongSequenceUnderATightLimitChoosesCp) {
  config::RunConfig c = small_model();
  c.model.n_layers = 2;
  c.model.max_seq_len = 8192;
  c.train.seq_len = 8192;
  c.train.global_batch = 2;
  c.train.micro_batch = 1;
  // The smallest peak of the layouts without cp and with it, with room for all.
  Result<SearchResult> all = search_layouts(test_cluster(2, 1e6, 1, 5), c, 2);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  double without = 1e30, with = 1e30;
  for (const Prediction& p : all->ranked) {
    double& smallest = p.layout.cp > 1 ? with : without;
    smallest = std::min(smallest, p.peak_gib());
  }
  ASSERT_LT(with, without) << "cp should hold the fewest activations of a long sequence";
  // A limit between them: only cp layouts fit, and the best is one.
  Result<SearchResult> tight = search_layouts(test_cluster(2, (with + without) / 2, 1, 5), c, 2);
  ASSERT_TRUE(tight.ok()) << tight.status().to_string();
  EXPECT_GT(tight->ranked.front().layout.cp, 1) << layout_name(tight->ranked.front().layout);
  for (const Prediction& p : tight->ranked) EXPECT_GT(p.layout.cp, 1) << layout_name(p.layout);
  EXPECT_GT(tight->over_memory, 0);
}

}  // namespace
}  // namespace ms::plan
