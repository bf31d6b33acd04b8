// The MoE expert-load summary on hand-made step records whose shares, imbalances and drops are
// known exactly: a balanced layer, a hot expert, capacity drops, steps of differing token counts,
// repeated steps of a resumed run, and the refusals.
#include "diag/moe_load.h"

#include <gtest/gtest.h>

#include <limits>

namespace ms::diag {
namespace {

using telemetry::RankTelemetry;
using telemetry::StepRecordRead;

using Counts = std::vector<std::vector<int64_t>>;  // [moe layer][expert]

StepRecordRead moe_step(int64_t step, Counts expert_tokens, std::vector<int64_t> dropped = {}) {
  StepRecordRead r;
  r.line = static_cast<size_t>(step) + 1;  // after the meta line
  r.step.step = step;
  r.step.expert_tokens = std::move(expert_tokens);
  r.step.dropped_tokens = std::move(dropped);
  return r;
}

RankTelemetry rank_of(std::vector<StepRecordRead> steps) {
  RankTelemetry rank;
  rank.path = "run/telemetry/rank-00000.jsonl";
  rank.steps = std::move(steps);
  return rank;
}

MoeLoadReport summarize(const RankTelemetry& rank) {
  Result<MoeLoadReport> report = summarize_moe_load(rank);
  EXPECT_TRUE(report.ok()) << report.status().to_string();
  return report.ok() ? *report : MoeLoadReport{};
}

TEST(MoeLoad, BalancedLayerHasEqualSharesAndImbalanceOne) {
  const MoeLoadReport r = summarize(rank_of({moe_step(1, {{25, 25, 25, 25}}),
                                             moe_step(2, {{30, 20, 20, 30}})}));
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.first_step, 1);
  EXPECT_EQ(r.last_step, 2);
  EXPECT_EQ(r.experts, 4);
  ASSERT_EQ(r.layers.size(), 1u);
  const MoeLayerLoad& l = r.layers[0];
  EXPECT_EQ(l.tokens, (std::vector<int64_t>{55, 45, 45, 55}));
  EXPECT_EQ(l.routed, 200);
  EXPECT_DOUBLE_EQ(l.shares[0], 0.275);
  EXPECT_DOUBLE_EQ(l.imbalance, 55.0 / 50);
  EXPECT_DOUBLE_EQ(l.worst_step_imbalance, 30.0 / 25);
  EXPECT_EQ(l.worst_step, 2);
  EXPECT_EQ(l.dropped, 0);
  EXPECT_EQ(l.verdict, "balanced");
}

TEST(MoeLoad, HotExpertIsNamedWithItsShareAndIdleExpertsCounted) {
  // Layer 0 balanced, layer 1 sends 70 of 100 tokens to expert 2 and none to expert 3.
  const MoeLoadReport r = summarize(rank_of({moe_step(1, {{25, 25, 25, 25}, {10, 20, 70, 0}})}));
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[0].verdict, "balanced");
  const MoeLayerLoad& hot = r.layers[1];
  EXPECT_EQ(hot.layer, 1);
  EXPECT_EQ(hot.hot_expert, 2);
  EXPECT_DOUBLE_EQ(hot.shares[2], 0.7);
  EXPECT_DOUBLE_EQ(hot.imbalance, 2.8);  // 70 / (100 / 4)
  EXPECT_EQ(hot.idle_experts, 1);
  EXPECT_EQ(hot.verdict, "expert 2 is hot: 70.0% of the tokens, 2.80x the mean; 1 experts got none");
}

TEST(MoeLoad, TheThresholdDecidesBalanced) {
  const RankTelemetry rank = rank_of({moe_step(1, {{60, 40}})});  // imbalance 1.2
  EXPECT_EQ(summarize(rank).layers[0].verdict, "balanced");
  Result<MoeLoadReport> strict = summarize_moe_load(rank, 1.1);
  ASSERT_TRUE(strict.ok());
  EXPECT_EQ(strict->layers[0].verdict, "expert 0 is hot: 60.0% of the tokens, 1.20x the mean");
  EXPECT_EQ(summarize_moe_load(rank, 0.9).status().code(), StatusCode::kInvalidArgument);
}

TEST(MoeLoad, DropsAreSummedPerLayerWithTheWorstStep) {
  const MoeLoadReport r = summarize(rank_of({moe_step(1, {{50, 50}, {50, 50}}, {0, 0}),
                                             moe_step(2, {{50, 50}, {50, 50}}, {0, 30}),
                                             moe_step(3, {{50, 50}, {50, 50}}, {0, 70})}));
  EXPECT_EQ(r.layers[0].dropped, 0);
  EXPECT_EQ(r.layers[0].most_dropped_step, -1);
  EXPECT_EQ(r.layers[0].verdict, "balanced");
  const MoeLayerLoad& l = r.layers[1];
  EXPECT_EQ(l.dropped, 100);
  EXPECT_EQ(l.steps_with_drops, 2);
  EXPECT_EQ(l.most_dropped, 70);
  EXPECT_EQ(l.most_dropped_step, 3);
  EXPECT_DOUBLE_EQ(l.dropped_share, 100.0 / 400);
  EXPECT_EQ(l.verdict, "balanced; 25.00% of the tokens dropped in 2 steps");
}

TEST(MoeLoad, StepsOfDifferingTokenCountsWeighShareByTokens) {
  // A large balanced step and a small skewed one: overall nearly balanced, the small step is the
  // worst one.
  const MoeLoadReport r =
      summarize(rank_of({moe_step(10, {{500, 500}}), moe_step(11, {{10, 0}})}));
  const MoeLayerLoad& l = r.layers[0];
  EXPECT_EQ(l.tokens, (std::vector<int64_t>{510, 500}));
  EXPECT_DOUBLE_EQ(l.imbalance, 510.0 / 505);
  EXPECT_DOUBLE_EQ(l.worst_step_imbalance, 2.0);
  EXPECT_EQ(l.worst_step, 11);
  EXPECT_EQ(l.verdict, "balanced");
}

TEST(MoeLoad, DenseRecordsAreLeftOutAndARepeatedStepCountsOnceByItsLastRecord) {
  // An older writer's step 1, then steps 2 and 3, then the resumed run repeating step 3.
  StepRecordRead dense;
  dense.step.step = 1;
  const MoeLoadReport r = summarize(rank_of({dense, moe_step(2, {{4, 4}}),
                                             moe_step(3, {{100, 0}}), moe_step(3, {{4, 4}})}));
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.steps_without_counts, 1);
  EXPECT_EQ(r.first_step, 2);
  EXPECT_EQ(r.layers[0].tokens, (std::vector<int64_t>{8, 8}));
  EXPECT_DOUBLE_EQ(r.layers[0].imbalance, 1.0);
}

TEST(MoeLoad, ALayerWithNoTokensSaysSo) {
  const MoeLoadReport r = summarize(rank_of({moe_step(1, {{0, 0}, {1, 1}})}));
  EXPECT_DOUBLE_EQ(r.layers[0].imbalance, 0);
  EXPECT_EQ(r.layers[0].worst_step, -1);
  EXPECT_EQ(r.layers[0].verdict, "no tokens routed");
}

TEST(MoeLoad, NoCountsIsNotFoundWithTheReason) {
  StepRecordRead dense;
  Result<MoeLoadReport> r = summarize_moe_load(rank_of({dense}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("no expert_tokens in the step records: not a MoE run, or "
                                      "written before this version"),
            std::string::npos)
      << r.status().message();
}

TEST(MoeLoad, AChangingShapeIsCorruptionNamingBothRecords) {
  Result<MoeLoadReport> r =
      summarize_moe_load(rank_of({moe_step(1, {{1, 1}}), moe_step(2, {{1, 1}, {1, 1}})}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(r.status().message(),
            "run/telemetry/rank-00000.jsonl:3: key 'expert_tokens' holds 2 MoE layers x 2 "
            "experts but run/telemetry/rank-00000.jsonl:2 holds 1 MoE layers x 2 experts; one "
            "run's records must agree, every layer with the same experts");
  // Records built by hand, not by the reader, are checked as well: ragged layers, drops of the
  // wrong length.
  EXPECT_EQ(summarize_moe_load(rank_of({moe_step(1, {{1, 1}, {1}})})).status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(summarize_moe_load(rank_of({moe_step(1, {{1, 1}}, {0, 0})})).status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(summarize_moe_load(rank_of({moe_step(1, {{}})})).status().code(),
            StatusCode::kCorruption);
}

TEST(MoeLoad, TotalsBeyondInt64AreCorruption) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  Result<MoeLoadReport> r =
      summarize_moe_load(rank_of({moe_step(1, {{big, 0}}), moe_step(2, {{1, 0}})}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("rank-00000.jsonl:3: key 'expert_tokens'"),
            std::string::npos)
      << r.status().message();
}

TEST(MoeLoad, TextAndJsonCarryTheTablesAndVerdicts) {
  const MoeLoadReport r = summarize(rank_of({moe_step(1, {{25, 25, 25, 25}, {10, 20, 70, 0}},
                                                      {0, 5})}));
  const std::string text = moe_load_text(r);
  EXPECT_NE(text.find("1 steps (1..1), 2 MoE layers x 4 experts"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0's records are read alone"), std::string::npos) << text;
  EXPECT_NE(text.find("        2             70   70.00%       2.80\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("      1       2.80         2.80           1             5  expert 2 is hot"),
            std::string::npos)
      << text;
  const nlohmann::ordered_json j = moe_load_json(r);
  EXPECT_EQ(j["layers"].size(), 2u);
  EXPECT_EQ(j["layers"][1]["hot_expert"], 2);
  EXPECT_EQ(j["layers"][1]["dropped"], 5);
  EXPECT_EQ(j["layers"][0]["verdict"], "balanced");
  EXPECT_EQ(j["layers"][1]["tokens"], (std::vector<int64_t>{10, 20, 70, 0}));
}

}  // namespace
}  // namespace ms::diag
