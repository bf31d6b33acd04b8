// plan_reshard with tensor parallelism, on a hand-made manifest of Llama-named tensors and the
// trainer's placement rule (parallel::tp_shard): for every target layout the planned boxes tile
// each tensor exactly, every box lies in its writer's tp slice, ZeRO ranges are flat ranges of
// the tp boxes, writes are balanced over the replicas, a vocabulary rank holding only padding
// writes nothing, and a tensor tp cannot split is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "ckpt/reshard_plan.h"
#include "parallel/tp_shards.h"

namespace ms::ckpt {
namespace {

const TpPlacement kRule = parallel::tp_shard;

TensorRecord tensor(std::string name, std::vector<int64_t> shape) {
  TensorRecord t;
  t.name = std::move(name);
  t.global_shape = std::move(shape);
  return t;
}

// Vocabulary 6 (tp=4 pads it to 8: rank 3 holds only padding), d_model 4, 8 query rows, and
// a tensor without elements.
Manifest llama_like() {
  Manifest m;
  m.tensors = {tensor("lm_head.weight", {6, 4}),
               tensor("model.embed_tokens.weight", {6, 4}),
               tensor("model.layers.0.input_layernorm.weight", {4}),
               tensor("model.layers.0.self_attn.o_proj.weight", {4, 8}),
               tensor("model.layers.0.self_attn.q_proj.weight", {8, 4}),
               tensor("model.norm.weight", {4}),
               tensor("model.rotary.unused_buffer", {0, 4}),  // no elements: no shards
               tensor("optimizer.exp_avg.model.embed_tokens.weight", {6, 4}),
               tensor("optimizer.exp_avg.model.layers.0.self_attn.o_proj.weight", {4, 8}),
               tensor("optimizer.exp_avg.model.norm.weight", {4}),
               tensor("optimizer.step", {})};
  return m;
}

// A layout without pipeline stages.
ReshardTarget layout(int dp, int tp, int zero) {
  ReshardTarget t;
  t.dp = dp;
  t.tp = tp;
  t.zero = zero;
  return t;
}

const std::vector<ReshardTarget> kTargets = {
    layout(1, 1, 0), layout(1, 2, 0), layout(2, 1, 0), layout(2, 2, 1),
    layout(1, 4, 0), layout(1, 2, 1), layout(3, 2, 1), layout(2, 4, 1)};

std::string layout_name(const ReshardTarget& t) {
  return "tp=" + std::to_string(t.tp) + ",dp=" + std::to_string(t.dp) +
         ",zero=" + std::to_string(t.zero);
}

Box tp_box_of(const TensorRecord& t, int tp, int tp_rank) {
  const comm::ShardSpec s = parallel::tp_shard(t.name, t.global_shape, tp, tp_rank).value();
  return {s.offsets(), s.lengths()};
}

bool inside(const Box& inner, const Box& outer) {
  for (size_t d = 0; d < inner.offsets.size(); ++d) {
    if (inner.offsets[d] < outer.offsets[d] ||
        inner.offsets[d] + inner.lengths[d] > outer.offsets[d] + outer.lengths[d]) {
      return false;
    }
  }
  return true;
}

TEST(ReshardPlanTest, BoxesTileEveryTensorAndLieInTheWritersTpSlice) {
  const Manifest m = llama_like();
  for (const ReshardTarget& target : kTargets) {
    SCOPED_TRACE(layout_name(target));
    Result<std::vector<PlannedShard>> plan = plan_reshard(m, target, kRule, nullptr, nullptr, 40);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    std::map<size_t, std::vector<Box>> boxes;
    for (const PlannedShard& s : *plan) {
      ASSERT_GE(s.target_rank, 0);
      ASSERT_LT(s.target_rank, target.world());
      EXPECT_GT(s.box.numel(), 0) << m.tensors[s.tensor].name;
      EXPECT_LE(s.box.numel() * 4, 40) << m.tensors[s.tensor].name;
      const TensorRecord& t = m.tensors[s.tensor];
      if (!t.global_shape.empty()) {
        EXPECT_TRUE(inside(s.box, tp_box_of(t, target.tp, s.target_rank % target.tp)))
            << t.name << " " << box_string(s.box) << " rank " << s.target_rank;
      }
      boxes[s.tensor].push_back(s.box);
    }
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      const std::optional<TilingProblem> p = find_tiling_problem(m.tensors[i].global_shape,
                                                                 boxes[i]);
      EXPECT_FALSE(p.has_value()) << m.tensors[i].name;
    }
  }
}

// Under zero=1, what dp rank d of tp rank r writes of an optimizer tensor is exactly the flat
// range [d*N/dp, (d+1)*N/dp) of r's tp box, in order.
TEST(ReshardPlanTest, ZeroRangesAreFlatRangesOfTheTpBoxes) {
  const Manifest m = llama_like();
  const ReshardTarget target = layout(2, 2, 1);
  Result<std::vector<PlannedShard>> plan =
      plan_reshard(m, target, kRule, nullptr, nullptr, 1 << 20);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const size_t o_proj = 8;  // optimizer.exp_avg...o_proj: columns split, 4 x 4 per tp rank
  ASSERT_EQ(m.tensors[o_proj].name, "optimizer.exp_avg.model.layers.0.self_attn.o_proj.weight");
  for (int r = 0; r < target.tp; ++r) {
    const Box tp = tp_box_of(m.tensors[o_proj], target.tp, r);
    const comm::ShardSpec box = comm::ShardSpec::box({4, 8}, tp.offsets, tp.lengths).value();
    for (int d = 0; d < target.dp; ++d) {
      std::vector<Box> want;
      const int64_t n = box.numel();
      for (const LocalBox& lb :
           spec_boxes(box.with_flat_range(n * d / target.dp, n * (d + 1) / target.dp).value())) {
        want.push_back(lb.box);
      }
      std::vector<Box> got;
      for (const PlannedShard& s : *plan) {
        if (s.tensor == o_proj && s.target_rank == d * target.tp + r) got.push_back(s.box);
      }
      EXPECT_EQ(got, want) << "dp rank " << d << " tp rank " << r;
    }
  }
}

// Equal replicated tensors spread evenly: with 4 target ranks each writes a quarter.
TEST(ReshardPlanTest, ReplicatedWritesAreBalancedOverTheHolders) {
  Manifest m;
  for (int i = 0; i < 8; ++i) {
    m.tensors.push_back(tensor("model.layers." + std::to_string(i) + ".input_layernorm.weight",
                               {16}));
  }
  m.tensors.push_back(tensor("model.layers.0.self_attn.q_proj.weight", {8, 4}));
  m.tensors.push_back(tensor("model.layers.1.self_attn.q_proj.weight", {8, 4}));
  Result<std::vector<PlannedShard>> plan =
      plan_reshard(m, layout(2, 2, 0), kRule, nullptr, nullptr, 1 << 20);
  ASSERT_TRUE(plan.ok());
  std::vector<int64_t> bytes(4, 0);
  for (const PlannedShard& s : *plan) bytes[static_cast<size_t>(s.target_rank)] += s.box.numel();
  EXPECT_EQ(bytes, std::vector<int64_t>(4, 8 * 16 / 4 + 2 * 16 / 2));
  // Each q_proj box (16 elements) is written once, by one of its dp replicas.
  int q_shards = 0;
  for (const PlannedShard& s : *plan) q_shards += s.tensor >= 8 ? 1 : 0;
  EXPECT_EQ(q_shards, 4);
}

TEST(ReshardPlanTest, ARankHoldingOnlyVocabularyPaddingWritesNothing) {
  const Manifest m = llama_like();
  Result<std::vector<PlannedShard>> plan =
      plan_reshard(m, layout(1, 4, 0), kRule, nullptr, nullptr, 1 << 20);
  ASSERT_TRUE(plan.ok());
  for (const PlannedShard& s : *plan) {
    const std::string& name = m.tensors[s.tensor].name;
    if (parallel::tp_split_of(name) == parallel::TpSplit::kVocab) {
      EXPECT_NE(s.target_rank, 3) << name;  // ids 6 and 7 of the padded 8 are not stored
    }
  }
}

TEST(ReshardPlanTest, ATensorTpCannotSplitIsRefusedByName) {
  Manifest m = llama_like();
  m.tensors.push_back(tensor("model.layers.1.mlp.up_proj.weight", {6, 4}));
  Result<std::vector<PlannedShard>> plan =
      plan_reshard(m, layout(1, 4, 0), kRule, nullptr, nullptr, 1 << 20);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  const std::string& msg = plan.status().message();
  EXPECT_NE(msg.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tp=4"), std::string::npos) << msg;
  EXPECT_TRUE(plan_reshard(m, layout(1, 2, 0), kRule, nullptr, nullptr, 1 << 20).ok());
}

TEST(ReshardPlanTest, TpNeedsAPlacementRule) {
  const Manifest m = llama_like();
  EXPECT_TRUE(plan_reshard(m, layout(2, 1, 1), nullptr, nullptr, nullptr, 1 << 20).ok());
  Result<std::vector<PlannedShard>> plan =
      plan_reshard(m, layout(1, 2, 0), nullptr, nullptr, nullptr, 1 << 20);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("placement"), std::string::npos);
}

TEST(ReshardPlanTest, TargetsAreParsedStrictly) {
  Result<ReshardTarget> t = parse_reshard_target("tp=2,dp=3,zero=1");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->tp, 2);
  EXPECT_EQ(t->dp, 3);
  EXPECT_EQ(t->zero, 1);
  EXPECT_EQ(t->world(), 6);
  EXPECT_EQ(parse_reshard_target("tp=4").value().dp, 1);
  EXPECT_TRUE(parse_reshard_target("pp=1,ep=1,tp=2").ok());
  EXPECT_FALSE(parse_reshard_target("pp=1,tp=2")->pipelined());
  EXPECT_NE(parse_reshard_target("ep=2").status().message().find("ep"), std::string::npos);
  EXPECT_FALSE(parse_reshard_target("tp=0").ok());
  EXPECT_NE(parse_reshard_target("cp=2").status().message().find("unknown key 'cp'"),
            std::string::npos);
}

}  // namespace
}  // namespace ms::ckpt
