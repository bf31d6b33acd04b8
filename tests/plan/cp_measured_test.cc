// Context parallelism costed as it runs (issue 50, item 1): where the profile ran the ring at a
// layout's shape (cp_attention_key), that time replaces 1/cp of the attention and the modelled
// hops, rescaled from the cp ranks' share of the node when it was timed to the job's.
#include <gtest/gtest.h>

#include "plan/profile_cp.h"
#include "plan/search.h"
#include "plan_fixtures.h"

namespace ms::plan {
namespace {

using fixtures::small_model;
using fixtures::test_cluster;

// small_model: micro-batch 4 of 128 tokens, 4 heads of 32, no window.
const AttentionOp kWhole{4, 128, 4, 4, 32, 0};

TEST(CpMeasured, KeysRoundTripAndAreClusterFileKeys) {
  const std::string key = cp_attention_key(kWhole, 2, true);
  EXPECT_EQ(key, "cp_attn_bwd 4x128x4x4x32x0x2");
  AttentionOp op;
  int cp = 0;
  bool backward = false;
  ASSERT_TRUE(parse_cp_attention_key(key, op, cp, backward));
  EXPECT_EQ(op.batch, 4);
  EXPECT_EQ(op.seq, 128);
  EXPECT_EQ(cp, 2);
  EXPECT_TRUE(backward);
  EXPECT_FALSE(parse_cp_attention_key("attn_bwd 4x128x4x4x32x0", op, cp, backward));
  EXPECT_FALSE(parse_cp_attention_key("cp_attn_fwd 4x130x4x4x32x0x4", op, cp, backward));
  Cluster c = test_cluster(2, 1e6);
  c.device.measured[key] = 0.01;
  Result<Cluster> back = cluster_from_yaml_text(cluster_to_yaml(c), "cp.yaml");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_DOUBLE_EQ(back->device.measured.at(key), 0.01);
}

TEST(CpMeasured, TheMeasuredRingReplacesTheModelledAttentionAndHops) {
  const config::RunConfig c = small_model();
  Layout l;
  l.dp = 1;
  l.cp = 2;
  l.micro_batch = 4;
  Cluster cluster = test_cluster(2, 1e6);
  Result<Prediction> modelled = predict_layout(cluster, c, l, 2);
  ASSERT_TRUE(modelled.ok()) << modelled.status().to_string();
  EXPECT_FALSE(modelled->cp_ring_measured);
  // A ring measured far slower than the model's 1/cp share: forward 1 s, backward 2 s per call.
  cluster.device.measured[cp_attention_key(kWhole, 2, false)] = 1.0;
  cluster.device.measured[cp_attention_key(kWhole, 2, true)] = 2.0;
  Result<Prediction> measured = predict_layout(cluster, c, l, 2);
  ASSERT_TRUE(measured.ok());
  EXPECT_TRUE(measured->cp_ring_measured);
  // 4 layers, 4 micro-batches per step (global batch 16 over micro-batches of 4 at dp 1).
  const double micro_batches = 16.0 / 4.0, layers = 4;
  EXPECT_GT(measured->forward_s, micro_batches * layers * 1.0);
  EXPECT_GT(measured->backward_s, micro_batches * layers * 2.0);
  EXPECT_GT(measured->step_s, modelled->step_s + micro_batches * layers * 2.5);
  // The wire figures stay: the bytes moved do not depend on how long they took.
  EXPECT_DOUBLE_EQ(measured->cp.bytes, modelled->cp.bytes);
  // Only that backward measured: the model stays (both passes or neither).
  cluster.device.measured.erase(cp_attention_key(kWhole, 2, false));
  Result<Prediction> half = predict_layout(cluster, c, l, 2);
  ASSERT_TRUE(half.ok());
  EXPECT_FALSE(half->cp_ring_measured);
}

// Timed with 2 cp ranks on a 1-device node (each had half of it); a job of 4 ranks on that node
// gives each a quarter, so the same ring takes twice as long.
TEST(CpMeasured, TheMeasuredTimeIsRescaledToTheJobsShareOfTheNode) {
  Cluster cluster = test_cluster(4, 1e6);
  cluster.devices_per_node = 1;
  cluster.device.measured[cp_attention_key(kWhole, 2, false)] = 1.0;
  const CostModel two(cluster, 2), four(cluster, 4);
  EXPECT_DOUBLE_EQ(two.measured_cp_attention_seconds(kWhole, 2, false), 1.0);
  EXPECT_DOUBLE_EQ(four.measured_cp_attention_seconds(kWhole, 2, false), 2.0);
  EXPECT_DOUBLE_EQ(four.measured_cp_attention_seconds(kWhole, 4, false), 0.0);  // not measured
}

}  // namespace
}  // namespace ms::plan
