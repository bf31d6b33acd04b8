// The deployment search of ms-infer plan: the pipeline model reproduces MegaScale-Infer's
// condition m >= 2 (1 + Tc / Tf) when attention and expert times are equal, the search keeps
// only plans within the latency target (best throughput first) and never gives an expert rank
// no experts, cost curves interpolate and extrapolate linearly, and the costs are measured on
// the model's own stages.
#include "infer/plan.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

CostCurve linear(double per_unit) { return CostCurve{{1, 100}, {per_unit, 100 * per_unit}}; }

// Attention and expert sides costing the same per micro-batch: Tf = 1 ms at b = 8 with 2
// attention ranks, top-2 of 4 experts over 2 expert ranks.
ServingCosts balanced(double tc_seconds) {
  ServingCosts c;
  c.layers = 4;
  c.num_experts = 4;
  c.top_k = 2;
  c.d_model = 64;
  c.attention = linear(1e-3 / 8);    // Ta(8) = 1 ms
  c.expert = linear(1e-3 / 2 / 8);   // 2 local experts x 8 rows each = 1 ms
  c.head = CostCurve{{1}, {0.0}};
  c.link_latency_s = tc_seconds;
  c.link_bytes_per_s = 1e30;  // Tc is the latency alone
  return c;
}

TEST(Plan, PipelineModelGivesThePapersMicroBatchCondition) {
  for (double tc : {0.0, 0.5e-3, 1e-3, 3e-3}) {
    const PlanRow row = evaluate_plan(balanced(tc), 2, 2, 1, 8);
    EXPECT_NEAR(row.ta, 1e-3, 1e-12);
    EXPECT_NEAR(row.te, 1e-3, 1e-12);
    EXPECT_NEAR(row.m_needed, 2 * (1 + tc / 1e-3), 1e-9);
    // Below the condition a layer takes one micro-batch's round trip; from it on, m * Tf.
    const int m_ok = static_cast<int>(std::ceil(row.m_needed - 1e-9));
    const PlanRow enough = evaluate_plan(balanced(tc), 2, 2, m_ok, 8);
    EXPECT_NEAR(enough.tpot_s, 4 * m_ok * 1e-3, 1e-9);
    if (m_ok > 1) {
      const PlanRow short_of = evaluate_plan(balanced(tc), 2, 2, m_ok - 1, 8);
      EXPECT_NEAR(short_of.tpot_s, 4 * (2e-3 + 2 * tc), 1e-9);
      // More micro-batches in flight add throughput until both sides are busy.
      EXPECT_GT(enough.tokens_per_s, short_of.tokens_per_s);
    }
  }
}

TEST(Plan, SearchKeepsPlansWithinTheTargetBestFirst) {
  const ServingCosts c = balanced(0.5e-3);
  const std::vector<int64_t> sizes = {1, 2, 4, 8, 16};
  const std::vector<PlanRow> rows = search_plans(c, 6, 20e-3, 6, sizes);
  ASSERT_FALSE(rows.empty());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_LE(rows[i].tpot_s, 20e-3);
    EXPECT_LE(rows[i].experts, c.num_experts);
    EXPECT_EQ(rows[i].attention + rows[i].experts, 6);
    if (i > 0) {
      EXPECT_LE(rows[i].tokens_per_s, rows[i - 1].tokens_per_s);
    }
  }
  EXPECT_TRUE(search_plans(c, 6, 1e-6, 6, sizes).empty());
  // A tighter target forbids the largest batches.
  const std::vector<PlanRow> tight = search_plans(c, 6, 5e-3, 6, sizes);
  ASSERT_FALSE(tight.empty());
  EXPECT_LT(tight.front().tokens_per_s, rows.front().tokens_per_s);
}

TEST(Plan, ColocatedRunsTheWholeLayerPerStep) {
  const ServingCosts c = balanced(0);
  const PlanRow row = colocated_plan(c, 4, 8);
  // Ta(8) = 1 ms, all 4 experts over 4 rows each = 4 * 0.25 ms: 2 ms per layer, 4 layers.
  EXPECT_NEAR(row.tpot_s, 8e-3, 1e-12);
  EXPECT_NEAR(row.tokens_per_s, 4 * 8 / 8e-3, 1e-6);
}

TEST(CostCurve, InterpolatesAndExtrapolatesLinearly) {
  const CostCurve c{{1, 4, 16}, {1.0, 2.0, 8.0}};
  EXPECT_DOUBLE_EQ(c(1), 1.0);
  EXPECT_DOUBLE_EQ(c(2.5), 1.5);
  EXPECT_DOUBLE_EQ(c(10), 5.0);
  EXPECT_DOUBLE_EQ(c(32), 16.0);
  EXPECT_DOUBLE_EQ(c(0), 2.0 / 3.0);  // the first segment continued, never below 0
  EXPECT_DOUBLE_EQ((CostCurve{{2}, {1.0}})(6), 3.0);
}

TEST(MeasureServingCosts, TimesTheModelsStagesAndRefusesWhatItCannotPlan) {
  auto moe = model::Transformer::create(testing::tiny_moe(), 3);
  ASSERT_TRUE(moe.ok());
  Result<ServingCosts> c = measure_serving_costs(**moe, 8, {1, 4}, {1, 8}, 1);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->layers, 2);
  EXPECT_EQ(c->attention.at, (std::vector<double>{1, 4}));
  EXPECT_EQ(c->expert.at, (std::vector<double>{1, 8}));
  for (double s : c->attention.seconds) EXPECT_GT(s, 0);
  for (double s : c->expert.seconds) EXPECT_GT(s, 0);
  EXPECT_NE(measure_serving_costs(**moe, 64, {1}, {1}, 1).status().message().find("--context"),
            std::string::npos);
  auto dense = model::Transformer::create(testing::tiny_dense(), 3);
  EXPECT_NE(measure_serving_costs(**dense, 8, {1}, {1}, 1).status().message().find("MoE"),
            std::string::npos);
}

}  // namespace
}  // namespace ms::infer
