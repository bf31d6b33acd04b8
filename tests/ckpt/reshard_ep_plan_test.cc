// plan_reshard onto expert-parallel layouts (`--to ep=2,dp=2`, `ep=2,dp=4,zero=1`,
// `ep=2,dp=2,tp=2`, `pp=2,ep=2,dp=2`), on the manifest of a 2-layer MoE model with 4 experts, a
// shared expert and one optimizer moment per parameter, with the trainer's rules
// (parallel::tp_shard, parallel::pp_ranks_holding, parallel::ep_rank_holding): every tensor is
// written exactly once; an expert of ep rank e only by target ranks whose dp_rank % ep == e;
// its ZeRO moment split over those dp ranks (its edp group); the router and the shared expert
// by any dp rank. An ep that does not divide dp, or the experts, and a dense model are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/hf_names.h"
#include "ckpt/reshard_plan.h"
#include "config/run_config.h"
#include "parallel/ep_placement.h"
#include "parallel/pp_placement.h"
#include "parallel/tp_shards.h"

namespace ms::ckpt {
namespace {

const TpPlacement kTpRule = parallel::tp_shard;
const PpPlacement kPpRule = parallel::pp_ranks_holding;
const EpPlacement kEpRule = parallel::ep_rank_holding;

config::ModelConfig moe_model(int64_t num_experts = 4) {
  config::ModelConfig c;
  c.vocab_size = 16;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 12;
  c.max_seq_len = 16;
  c.moe.num_experts = num_experts;
  c.moe.top_k = std::min<int64_t>(2, std::max<int64_t>(1, num_experts));
  c.moe.shared_expert_d_ff = num_experts > 0 ? 4 : 0;
  return c;
}

// Every parameter of `model` and its optimizer.exp_avg moment, sorted by name, with the run
// config recorded as a save records it.
Manifest model_manifest(const config::ModelConfig& model) {
  Manifest m;
  for (const TensorInfo& info : hf_parameter_specs(model)) {
    for (const std::string& name : {info.name, "optimizer.exp_avg." + info.name}) {
      TensorRecord t;
      t.name = name;
      t.global_shape = info.shape;
      m.tensors.push_back(std::move(t));
    }
  }
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.name < b.name; });
  config::RunConfig run;
  run.model = model;
  run.train.seq_len = model.max_seq_len;
  m.config_yaml = config::dump_yaml(run);
  return m;
}

ReshardTarget target(std::string_view text) {
  Result<ReshardTarget> t = parse_reshard_target(text);
  EXPECT_TRUE(t.ok()) << text << ": " << t.status().to_string();
  return t.ok() ? *t : ReshardTarget{};
}

int dp_rank_of(const ReshardTarget& t, int rank) { return rank / t.tp % t.dp; }

Result<std::vector<PlannedShard>> plan_for(const Manifest& m, const ReshardTarget& t,
                                           uint64_t max_bytes = 1 << 20) {
  return plan_reshard(m, t, kTpRule, kPpRule, kEpRule, max_bytes);
}

std::string expert(int layer, int e, const char* w = "w1") {
  return "model.layers." + std::to_string(layer) + ".block_sparse_moe.experts." +
         std::to_string(e) + "." + w + ".weight";
}

// Elements each target rank writes of each tensor, by name.
std::map<std::string, std::map<int, int64_t>> elements_by_rank(
    const Manifest& m, const std::vector<PlannedShard>& plan) {
  std::map<std::string, std::map<int, int64_t>> out;
  for (const PlannedShard& s : plan) {
    out[m.tensors[s.tensor].name][s.target_rank] += s.box.numel();
  }
  return out;
}

TEST(ReshardEpPlanTest, EveryTensorIsWrittenOnceByARankOfItsEpGroup) {
  const Manifest m = model_manifest(moe_model());
  for (const char* text : {"ep=2,dp=2", "ep=4,dp=4", "ep=2,dp=4,zero=1", "ep=2,dp=6,zero=1",
                           "ep=2,dp=2,tp=2", "ep=2,dp=4,tp=2,zero=1", "pp=2,ep=2,dp=2",
                           "pp=2,ep=2,dp=2,tp=2,zero=1", "ep=1,dp=2"}) {
    SCOPED_TRACE(text);
    const ReshardTarget t = target(text);
    Result<std::vector<PlannedShard>> plan = plan_for(m, t, 48);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    std::map<size_t, std::vector<Box>> boxes;
    for (const PlannedShard& s : *plan) {
      ASSERT_GE(s.target_rank, 0);
      ASSERT_LT(s.target_rank, t.world());
      const std::string& name = m.tensors[s.tensor].name;
      const std::optional<int> owner = parallel::ep_rank_holding(name, 4, t.ep).value();
      if (owner) {
        EXPECT_EQ(dp_rank_of(t, s.target_rank) % t.ep, *owner)
            << name << " written by rank " << s.target_rank;
      }
      boxes[s.tensor].push_back(s.box);
    }
    for (size_t i = 0; i < m.tensors.size(); ++i) {  // disjoint and covering: once each
      EXPECT_FALSE(find_tiling_problem(m.tensors[i].global_shape, boxes[i]).has_value())
          << m.tensors[i].name;
    }
  }
}

// ep=2, dp=2: rank 0 is ep rank 0 (experts 0, 1), rank 1 ep rank 1 (experts 2, 3).
TEST(ReshardEpPlanTest, TwoEpRanksWriteTheirHalvesOfTheExperts) {
  const Manifest m = model_manifest(moe_model());
  Result<std::vector<PlannedShard>> plan = plan_for(m, target("ep=2,dp=2"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const auto w = elements_by_rank(m, *plan);
  for (int layer = 0; layer < 2; ++layer) {
    for (int e = 0; e < 4; ++e) {
      for (const char* x : {"w1", "w2", "w3"}) {
        const std::string name = expert(layer, e, x);
        EXPECT_EQ(w.at(name), (std::map<int, int64_t>{{e / 2, 96}})) << name;
        EXPECT_EQ(w.at("optimizer.exp_avg." + name), (std::map<int, int64_t>{{e / 2, 96}}))
            << name;
      }
    }
  }
  // The experts weigh the same on both ranks, and the replicated rest is balanced over them to
  // within its largest tensor (the 16 x 8 embedding and output layer).
  std::map<int, int64_t> total;
  for (const auto& [name, by_rank] : w) {
    for (const auto& [rank, n] : by_rank) total[rank] += n;
  }
  ASSERT_EQ(total.size(), 2u);
  EXPECT_LE(std::abs(total[0] - total[1]), 128);
  const auto& router = w.at("model.layers.0.block_sparse_moe.gate.weight");
  EXPECT_EQ(router.size(), 1u);  // replicated: written once, by either
}

// ep=2, dp=4, zero=1: expert 0's edp group is dp ranks 0 and 2, expert 3's dp ranks 1 and 3;
// each writes half of the moment. The router's moment is split over all four dp ranks.
TEST(ReshardEpPlanTest, ZeroSplitsAnExpertsMomentsOverItsEdpGroup) {
  const Manifest m = model_manifest(moe_model());
  Result<std::vector<PlannedShard>> plan = plan_for(m, target("ep=2,dp=4,zero=1"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const auto w = elements_by_rank(m, *plan);
  EXPECT_EQ(w.at("optimizer.exp_avg." + expert(0, 0)), (std::map<int, int64_t>{{0, 48}, {2, 48}}));
  EXPECT_EQ(w.at("optimizer.exp_avg." + expert(1, 3, "w2")),
            (std::map<int, int64_t>{{1, 48}, {3, 48}}));
  EXPECT_EQ(w.at("optimizer.exp_avg.model.layers.0.block_sparse_moe.gate.weight"),
            (std::map<int, int64_t>{{0, 8}, {1, 8}, {2, 8}, {3, 8}}));
  const auto& param = w.at(expert(0, 1));  // the parameter itself: once, by one of the group
  ASSERT_EQ(param.size(), 1u);
  EXPECT_EQ(param.begin()->first % 2, 0);
}

// ep=2, dp=2, tp=2: ranks 0, 1 are dp rank 0's tp ranks (ep rank 0), 2, 3 dp rank 1's; each
// tp rank of the holding ep rank writes its slice of an expert.
TEST(ReshardEpPlanTest, ExpertsAreSlicedOverTheTpRanksOfTheirEpRank) {
  const Manifest m = model_manifest(moe_model());
  const ReshardTarget t = target("ep=2,dp=2,tp=2");
  EXPECT_EQ(t.world(), 4);
  Result<std::vector<PlannedShard>> plan = plan_for(m, t);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::map<std::string, std::map<int, Box>> by_rank;
  for (const PlannedShard& s : *plan) by_rank[m.tensors[s.tensor].name][s.target_rank] = s.box;
  EXPECT_EQ(by_rank.at(expert(0, 1, "w1")),
            (std::map<int, Box>{{0, Box{{0, 0}, {6, 8}}}, {1, Box{{6, 0}, {6, 8}}}}));
  EXPECT_EQ(by_rank.at(expert(1, 2, "w2")),
            (std::map<int, Box>{{2, Box{{0, 0}, {8, 6}}}, {3, Box{{0, 6}, {8, 6}}}}));
  const auto& shared = by_rank.at("model.layers.0.mlp.shared_expert.gate_proj.weight");
  ASSERT_EQ(shared.size(), 2u);  // each tp rank's slice once, by either dp rank
  std::map<int, Box> by_tp_rank;
  for (const auto& [rank, box] : shared) by_tp_rank[rank % 2] = box;
  EXPECT_EQ(by_tp_rank, (std::map<int, Box>{{0, Box{{0, 0}, {2, 8}}}, {1, Box{{2, 0}, {2, 8}}}}));
}

// pp=2, ep=2, dp=2: ranks 0, 1 are stage 0's dp ranks, 2, 3 stage 1's; an expert goes to the
// stage holding its layer and there to the dp rank of its ep rank.
TEST(ReshardEpPlanTest, ExpertsGoToTheirStageAndEpRank) {
  const Manifest m = model_manifest(moe_model());
  const ReshardTarget t = target("pp=2,ep=2,dp=2");
  EXPECT_EQ(t.world(), 4);
  Result<std::vector<PlannedShard>> plan = plan_for(m, t);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const auto w = elements_by_rank(m, *plan);
  EXPECT_EQ(w.at(expert(0, 1)), (std::map<int, int64_t>{{0, 96}}));
  EXPECT_EQ(w.at(expert(0, 2)), (std::map<int, int64_t>{{1, 96}}));
  EXPECT_EQ(w.at(expert(1, 0, "w3")), (std::map<int, int64_t>{{2, 96}}));
  EXPECT_EQ(w.at("optimizer.exp_avg." + expert(1, 3)), (std::map<int, int64_t>{{3, 96}}));
  const auto& gate = w.at("model.layers.1.block_sparse_moe.gate.weight");
  ASSERT_EQ(gate.size(), 1u);
  EXPECT_GE(gate.begin()->first, 2);
}

TEST(ReshardEpPlanTest, EpThatDoesNotDivideDpOrTheExpertsIsRefused) {
  Result<ReshardTarget> parsed = parse_reshard_target("ep=2,dp=3");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("ep must divide dp"), std::string::npos)
      << parsed.status().message();
  ReshardTarget direct;
  direct.ep = 2;
  direct.dp = 3;
  EXPECT_FALSE(plan_for(model_manifest(moe_model()), direct).ok());

  const struct {
    int64_t experts;
    const char* text;
    const char* want;
  } cases[] = {{6, "ep=4,dp=4", "model.moe.num_experts 6 is not a positive multiple of ep 4"},
               {0, "ep=2,dp=2", "model.moe.num_experts 0 is not a positive multiple of ep 2"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    Result<std::vector<PlannedShard>> plan = plan_for(model_manifest(moe_model(c.experts)),
                                                      target(c.text));
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(plan.status().message().find(c.want), std::string::npos)
        << plan.status().message();
  }
  // A dense model is fine without experts to place.
  EXPECT_TRUE(plan_for(model_manifest(moe_model(0)), target("dp=2")).ok());
}

TEST(ReshardEpPlanTest, AnExpertParallelTargetNeedsTheRuleAndTheRunConfig) {
  Manifest m = model_manifest(moe_model());
  Result<std::vector<PlannedShard>> no_rule =
      plan_reshard(m, target("ep=2,dp=2"), kTpRule, kPpRule, nullptr, 1 << 20);
  ASSERT_FALSE(no_rule.ok());
  EXPECT_NE(no_rule.status().message().find("expert placement"), std::string::npos);
  m.config_yaml.clear();
  Result<std::vector<PlannedShard>> no_config = plan_for(m, target("ep=2,dp=2"));
  ASSERT_FALSE(no_config.ok());
  EXPECT_NE(no_config.status().message().find("model.moe.num_experts"), std::string::npos)
      << no_config.status().message();
  EXPECT_TRUE(plan_for(m, target("dp=2")).ok());  // without ep, no expert count is needed
}

TEST(ReshardEpPlanTest, EpIsParsedAndPrintedBack) {
  const ReshardTarget t = target("ep=4,dp=4");
  EXPECT_EQ(t.ep, 4);
  EXPECT_EQ(t.world(), 4);  // ep groups dp ranks: it adds no ranks
  EXPECT_EQ(target("ep=2,dp=2,tp=2").world(), 4);
  EXPECT_EQ(target("pp=2,ep=2,dp=2").world(), 4);
  EXPECT_EQ(target("dp=2").ep, 1);
  EXPECT_FALSE(parse_reshard_target("ep=0").ok());
  EXPECT_FALSE(parse_reshard_target("ep=x,dp=2").ok());
  EXPECT_EQ(reshard_target_string(target("ep=2,dp=2")), "tp=1,ep=2,dp=2,zero=0");
  EXPECT_EQ(reshard_target_string(target("ep=1,dp=2")), "tp=1,dp=2,zero=0");
  for (const char* text : {"ep=2,dp=4,zero=1", "pp=2,ep=2,dp=2,tp=2"}) {
    const ReshardTarget a = target(text);
    const ReshardTarget back = target(reshard_target_string(a));
    EXPECT_EQ(back.ep, a.ep) << text;
    EXPECT_EQ(back.dp, a.dp) << text;
    EXPECT_EQ(back.pp, a.pp) << text;
    EXPECT_EQ(back.tp, a.tp) << text;
    EXPECT_EQ(back.zero, a.zero) << text;
  }
}

// A run config recorded in the manifest that contradicts the tensors stored is refused, not
// followed: 8 experts recorded where 4 are stored, or 4e8 layers where 2 are.
TEST(ReshardEpPlanTest, ARecordedConfigThatContradictsTheTensorsIsCorruption) {
  Manifest lie = model_manifest(moe_model(4));
  config::RunConfig run;
  run.model = moe_model(8);
  run.train.seq_len = run.model.max_seq_len;
  lie.config_yaml = config::dump_yaml(run);
  Result<std::vector<PlannedShard>> plan = plan_for(lie, target("ep=2,dp=2"));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(plan.status().message(),
            "config_yaml: model.moe.num_experts is 8 but the tensors hold 4 experts per layer");
  run.model = moe_model(4);
  run.model.n_layers = 400000000;
  lie.config_yaml = config::dump_yaml(run);
  plan = plan_for(lie, target("pp=2,dp=1"));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "config_yaml: model.n_layers is 400000000 but the tensors hold 2 layers "
            "(model.layers.0 to model.layers.1)");
  EXPECT_TRUE(plan_for(lie, target("dp=2")).ok());  // neither count places anything here
}

TEST(ReshardEpPlanTest, TargetsAreBoundedAndKeysGivenOnce) {
  EXPECT_EQ(parse_reshard_target("tp=2,tp=4").status().message(),
            "--to: key 'tp' is given twice in 'tp=2,tp=4'");
  EXPECT_EQ(parse_reshard_target("dp=2,ep=2,ep=2").status().message(),
            "--to: key 'ep' is given twice in 'dp=2,ep=2,ep=2'");
  EXPECT_EQ(parse_reshard_target("dp=1000000000").status().message(),
            "--to pp * dp * tp (1 * 1000000000 * 1) = 1000000000: a target layout has at most "
            "1048576 ranks");
  EXPECT_EQ(parse_reshard_target("dp=65536,tp=65536,pp=65536").status().message(),
            "--to pp * dp * tp (65536 * 65536 * 65536) = 281474976710656: a target layout has "
            "at most 1048576 ranks");
  EXPECT_EQ(parse_reshard_target("pp=2,vpp=2147483647").status().message(),
            "--to pp * vpp (2 * 2147483647) = 4294967294: a target layout has at most 1048576 "
            "pipeline stages");
  EXPECT_EQ(parse_reshard_target("dp=99999999999").status().message(),
            "--to dp=99999999999: out of range (at most 1048576)");
  EXPECT_EQ(parse_reshard_target("dp=-3").status().message(),
            "--to dp=-3: expected a non-negative whole number");
  EXPECT_EQ(parse_reshard_target("dp=1e9").status().message(),
            "--to dp=1e9: expected a non-negative whole number");
  // A tp above every dimension could split nothing: refused before any rank is visited.
  const Manifest m = model_manifest(moe_model(4));
  Result<std::vector<PlannedShard>> plan = plan_for(m, target("tp=1048576"));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "--to tp=1048576: larger than every dimension of the checkpoint's tensors (the "
            "largest is 16), so no tensor can be split that many ways");
}

}  // namespace
}  // namespace ms::ckpt
