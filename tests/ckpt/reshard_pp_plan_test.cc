// plan_reshard onto pipeline layouts (`--to pp=2`, `pp=2,vpp=2`, `pp=2,tp=2`, `pp_layers=3+1`),
// on the manifest of a 4-layer Llama with one optimizer moment per parameter and its run config,
// with the trainer's rules (parallel::tp_shard, parallel::pp_ranks_holding): every tensor is
// written exactly once, by a target rank (pp_rank * dp + dp_rank) * tp + tp_rank of a pipeline
// rank that holds it; the last stage writes lm_head and the final norm; a tied embedding may be
// written by either end; cuts pp_stage_layers refuses are refused with its message.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "ckpt/hf_names.h"
#include "ckpt/reshard_plan.h"
#include "config/run_config.h"
#include "parallel/pp_placement.h"
#include "parallel/pp_stages.h"
#include "parallel/tp_shards.h"

namespace ms::ckpt {
namespace {

const TpPlacement kTpRule = parallel::tp_shard;
const PpPlacement kPpRule = parallel::pp_ranks_holding;

config::ModelConfig four_layers(bool tied = false) {
  config::ModelConfig c;
  c.vocab_size = 16;
  c.d_model = 8;
  c.n_layers = 4;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 12;
  c.max_seq_len = 16;
  c.tie_embeddings = tied;
  return c;
}

// Every parameter of `model` and its optimizer.exp_avg moment, sorted by name, with the run
// config recorded as a save records it.
Manifest llama_manifest(const config::ModelConfig& model) {
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

int pp_rank_of(const ReshardTarget& t, int rank) { return rank / (t.dp * t.tp); }

// Target ranks writing each tensor, by name.
std::map<std::string, std::vector<int>> writers(const Manifest& m,
                                                const std::vector<PlannedShard>& plan) {
  std::map<std::string, std::vector<int>> out;
  for (const PlannedShard& s : plan) out[m.tensors[s.tensor].name].push_back(s.target_rank);
  return out;
}

Result<std::vector<PlannedShard>> plan_for(const Manifest& m, const ReshardTarget& t) {
  return plan_reshard(m, t, kTpRule, kPpRule, nullptr, 1 << 20);
}

TEST(ReshardPpPlanTest, EveryTensorIsWrittenOnceByAPipelineRankHoldingIt) {
  for (bool tied : {false, true}) {
    const Manifest m = llama_manifest(four_layers(tied));
    for (const char* text : {"pp=2", "pp=2,vpp=2", "pp=2,tp=2", "pp=2,vpp=2,dp=2,zero=1",
                             "pp=2,tp=2,dp=2,zero=1", "pp=4", "pp=2,pp_layers=3+1",
                             "vpp=2,pp=1", "pp=2,vpp=2,tp=2,dp=3,zero=1"}) {
      SCOPED_TRACE(std::string(text) + (tied ? " tied" : ""));
      const ReshardTarget t = target(text);
      Result<std::vector<PlannedShard>> plan = plan_reshard(m, t, kTpRule, kPpRule, nullptr, 48);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      std::map<size_t, std::vector<Box>> boxes;
      for (const PlannedShard& s : *plan) {
        ASSERT_GE(s.target_rank, 0);
        ASSERT_LT(s.target_rank, t.world());
        const std::string& name = m.tensors[s.tensor].name;
        const std::vector<int> holders =
            parallel::pp_ranks_holding(name, 4, tied, t.pp, t.vpp, t.pp_layers).value();
        EXPECT_NE(std::find(holders.begin(), holders.end(), pp_rank_of(t, s.target_rank)),
                  holders.end()) << name << " written by rank " << s.target_rank;
        boxes[s.tensor].push_back(s.box);
      }
      for (size_t i = 0; i < m.tensors.size(); ++i) {  // disjoint and covering: once each
        EXPECT_FALSE(find_tiling_problem(m.tensors[i].global_shape, boxes[i]).has_value())
            << m.tensors[i].name;
      }
    }
  }
}

TEST(ReshardPpPlanTest, TwoStagesWriteTheirHalvesAndTheLastWritesTheHead) {
  const Manifest m = llama_manifest(four_layers());
  Result<std::vector<PlannedShard>> plan = plan_for(m, target("pp=2"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const auto w = writers(m, *plan);
  EXPECT_EQ(w.at("model.embed_tokens.weight"), std::vector<int>{0});
  EXPECT_EQ(w.at("model.layers.1.self_attn.q_proj.weight"), std::vector<int>{0});
  EXPECT_EQ(w.at("model.layers.2.self_attn.q_proj.weight"), std::vector<int>{1});
  EXPECT_EQ(w.at("model.layers.3.mlp.down_proj.weight"), std::vector<int>{1});
  EXPECT_EQ(w.at("model.norm.weight"), std::vector<int>{1});
  EXPECT_EQ(w.at("lm_head.weight"), std::vector<int>{1});
  EXPECT_EQ(w.at("optimizer.exp_avg.lm_head.weight"), std::vector<int>{1});
  EXPECT_EQ(w.at("optimizer.exp_avg.model.layers.0.mlp.up_proj.weight"), std::vector<int>{0});
}

// pp=2, vpp=2 over 4 layers: virtual stage s = layer s, on pipeline rank s % 2.
TEST(ReshardPpPlanTest, InterleavedStagesAlternateLayersBetweenTheRanks) {
  const Manifest m = llama_manifest(four_layers());
  Result<std::vector<PlannedShard>> plan = plan_for(m, target("pp=2,vpp=2"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const auto w = writers(m, *plan);
  for (int layer = 0; layer < 4; ++layer) {
    const std::string name = "model.layers." + std::to_string(layer) + ".mlp.up_proj.weight";
    EXPECT_EQ(w.at(name), std::vector<int>{layer % 2}) << name;
    EXPECT_EQ(w.at("optimizer.exp_avg." + name), std::vector<int>{layer % 2}) << name;
  }
  EXPECT_EQ(w.at("model.embed_tokens.weight"), std::vector<int>{0});
  EXPECT_EQ(w.at("model.norm.weight"), std::vector<int>{1});
  EXPECT_EQ(w.at("lm_head.weight"), std::vector<int>{1});
}

// pp=2, tp=2: ranks 0, 1 are stage 0's tp ranks, 2, 3 stage 1's; split tensors are written by
// both tp ranks of their stage (each its own box), replicated ones once.
TEST(ReshardPpPlanTest, PipelineAndTensorParallelRanksFollowTheMeshOrder) {
  const Manifest m = llama_manifest(four_layers());
  const ReshardTarget t = target("pp=2,tp=2");
  EXPECT_EQ(t.world(), 4);
  Result<std::vector<PlannedShard>> plan = plan_for(m, t);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::map<std::string, std::map<int, Box>> by_rank;
  for (const PlannedShard& s : *plan) by_rank[m.tensors[s.tensor].name][s.target_rank] = s.box;
  const auto& head = by_rank.at("lm_head.weight");  // vocabulary 16: 8 rows per tp rank
  ASSERT_EQ(head.size(), 2u);
  EXPECT_EQ(head.at(2), (Box{{0, 0}, {8, 8}}));
  EXPECT_EQ(head.at(3), (Box{{8, 0}, {8, 8}}));
  const auto& embed = by_rank.at("model.embed_tokens.weight");
  ASSERT_EQ(embed.size(), 2u);
  EXPECT_EQ(embed.at(0), (Box{{0, 0}, {8, 8}}));
  EXPECT_EQ(embed.at(1), (Box{{8, 0}, {8, 8}}));
  const auto& o_proj = by_rank.at("model.layers.3.self_attn.o_proj.weight");  // columns
  ASSERT_EQ(o_proj.size(), 2u);
  EXPECT_EQ(o_proj.at(2), (Box{{0, 0}, {8, 4}}));
  EXPECT_EQ(o_proj.at(3), (Box{{0, 4}, {8, 4}}));
  const auto& norm = by_rank.at("model.norm.weight");  // replicated over tp: once
  ASSERT_EQ(norm.size(), 1u);
  EXPECT_GE(norm.begin()->first, 2);
  const auto& q0 = by_rank.at("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q0.size(), 2u);
  EXPECT_TRUE(q0.contains(0) && q0.contains(1));
}

// With ZeRO, a stage's optimizer state is split over the dp ranks of its pipeline rank:
// pp=2, dp=2 puts lm_head's moment on ranks 2 and 3, half each.
TEST(ReshardPpPlanTest, ZeroRangesSplitOverTheDpRanksOfTheHoldingStage) {
  const Manifest m = llama_manifest(four_layers());
  Result<std::vector<PlannedShard>> plan = plan_for(m, target("pp=2,dp=2,zero=1"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::map<int, int64_t> elements;
  for (const PlannedShard& s : *plan) {
    if (m.tensors[s.tensor].name == "optimizer.exp_avg.lm_head.weight") {
      elements[s.target_rank] += s.box.numel();
    }
  }
  EXPECT_EQ(elements, (std::map<int, int64_t>{{2, 64}, {3, 64}}));
}

// A tied embedding's holders are both ends: after pp_layers=3+1 loads rank 0 with three layers,
// the embedding's moment goes to the lighter last stage, the embedding itself (written first)
// to rank 0.
TEST(ReshardPpPlanTest, ATiedEmbeddingCanBeWrittenByTheLastStage) {
  const Manifest m = llama_manifest(four_layers(true));
  ASSERT_EQ(m.find("lm_head.weight"), nullptr);
  Result<std::vector<PlannedShard>> plan = plan_for(m, target("pp=2,pp_layers=3+1"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const auto w = writers(m, *plan);
  EXPECT_EQ(w.at("model.embed_tokens.weight"), std::vector<int>{0});
  EXPECT_EQ(w.at("optimizer.exp_avg.model.embed_tokens.weight"), std::vector<int>{1});
  EXPECT_EQ(w.at("model.norm.weight"), std::vector<int>{1});
}

TEST(ReshardPpPlanTest, CutsThatDoNotFitAreRefusedWithPpStageLayersMessage) {
  const Manifest m = llama_manifest(four_layers());
  const struct {
    const char* text;
    int pp, vpp;
    std::vector<int64_t> counts;
  } cases[] = {{"pp=2,pp_layers=3+2", 2, 1, {3, 2}},
               {"pp=2,pp_layers=4+0", 2, 1, {4, 0}},
               {"pp=2,vpp=2,pp_layers=2+2", 2, 2, {2, 2}},
               {"pp=3", 3, 1, {}},
               {"pp=8", 8, 1, {}}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    Result<std::vector<PlannedShard>> plan = plan_for(m, target(c.text));
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
    const std::string& msg = plan.status().message();
    const std::string want = parallel::pp_stage_layers(4, c.pp, c.vpp, c.counts).status().message();
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
    EXPECT_NE(msg.find("--to pp="), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.n_layers 4"), std::string::npos) << msg;
  }
}

TEST(ReshardPpPlanTest, ATensorThePipelineRuleDoesNotKnowIsRefusedByName) {
  Manifest m = llama_manifest(four_layers());
  TensorRecord extra;
  extra.name = "model.rotary.inv_freq";
  extra.global_shape = {4};
  m.tensors.push_back(extra);
  Result<std::vector<PlannedShard>> plan = plan_for(m, target("pp=2"));
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("\"model.rotary.inv_freq\""), std::string::npos)
      << plan.status().message();
  EXPECT_TRUE(plan_for(m, target("tp=2")).ok());  // without pp, no stage is needed
}

TEST(ReshardPpPlanTest, APipelinedTargetNeedsTheRuleAndTheRunConfig) {
  Manifest m = llama_manifest(four_layers());
  Result<std::vector<PlannedShard>> no_rule =
      plan_reshard(m, target("pp=2"), kTpRule, nullptr, nullptr, 1 << 20);
  ASSERT_FALSE(no_rule.ok());
  EXPECT_NE(no_rule.status().message().find("pipeline placement"), std::string::npos);
  m.config_yaml.clear();
  Result<std::vector<PlannedShard>> no_config = plan_for(m, target("pp=2"));
  ASSERT_FALSE(no_config.ok());
  EXPECT_NE(no_config.status().message().find("model.n_layers"), std::string::npos)
      << no_config.status().message();
  EXPECT_TRUE(plan_for(m, target("tp=2,dp=2")).ok());
}

TEST(ReshardPpPlanTest, PipelineKeysAreParsedStrictly) {
  const ReshardTarget t = target("pp=2,vpp=2,dp=2");
  EXPECT_EQ(t.pp, 2);
  EXPECT_EQ(t.vpp, 2);
  EXPECT_EQ(t.dp, 2);
  EXPECT_EQ(t.world(), 4);  // pp x dp x tp: vpp adds chunks, not ranks
  EXPECT_TRUE(t.pipelined());
  const ReshardTarget counts = target("pp_layers=4+2,pp=2,tp=2");
  EXPECT_EQ(counts.pp_layers, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(counts.world(), 4);
  EXPECT_EQ(target("pp_layers=6").pp_layers, std::vector<int64_t>{6});
  EXPECT_TRUE(target("pp_layers=6").pipelined());
  for (const char* bad : {"pp_layers=4++2", "pp_layers=", "pp_layers=+4", "pp_layers=4+",
                          "pp_layers=4+x", "pp_layers=4+-1"}) {
    Result<ReshardTarget> r = parse_reshard_target(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("pp_layers"), std::string::npos) << r.status().message();
  }
  // A ',' ends the item, so "4,2" is not a list: the '2' is an item without a key.
  EXPECT_NE(parse_reshard_target("pp_layers=4,2").status().message().find("key=value"),
            std::string::npos);
  EXPECT_FALSE(parse_reshard_target("pp=0").ok());
  EXPECT_FALSE(parse_reshard_target("vpp=0").ok());
  EXPECT_NE(parse_reshard_target("ep=2").status().message().find("ep must divide dp"),
            std::string::npos);
}

TEST(ReshardPpPlanTest, TheTargetStringParsesBackToTheTarget) {
  for (const char* text : {"tp=2,dp=3,zero=1", "pp=2,vpp=2,dp=2", "pp=2,pp_layers=4+2,tp=2"}) {
    const ReshardTarget t = target(text);
    const ReshardTarget back = target(reshard_target_string(t));
    EXPECT_EQ(back.pp, t.pp) << text;
    EXPECT_EQ(back.vpp, t.vpp) << text;
    EXPECT_EQ(back.pp_layers, t.pp_layers) << text;
    EXPECT_EQ(back.tp, t.tp) << text;
    EXPECT_EQ(back.dp, t.dp) << text;
    EXPECT_EQ(back.zero, t.zero) << text;
  }
  EXPECT_EQ(reshard_target_string(target("tp=2")), "tp=2,dp=1,zero=0");
  EXPECT_EQ(reshard_target_string(target("pp=2,pp_layers=4+2")),
            "pp=2,vpp=1,pp_layers=4+2,tp=1,dp=1,zero=0");
}

}  // namespace
}  // namespace ms::ckpt
