// parallel::pp_ranks_holding, the pipeline placement rule by tensor name that ms-ckpt reshard
// writes by and the trainer loads by: the embedding on stage 0 (and the last stage when tied),
// a layer on the stage whose cut holds it, the final norm and output layer on the last stage,
// optimizer state with its parameter, virtual stage s on pipeline rank s % pp; unknown names,
// layers out of range and cuts that do not fit are refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/pp_placement.h"
#include "parallel/pp_stages.h"

namespace ms::parallel {
namespace {

using Ranks = std::vector<int>;

Ranks ranks(std::string_view name, int64_t n_layers, int pp, int vpp,
            const std::vector<int64_t>& counts = {}, bool tied = false) {
  Result<Ranks> r = pp_ranks_holding(name, n_layers, tied, pp, vpp, counts);
  EXPECT_TRUE(r.ok()) << name << ": " << r.status().to_string();
  return r.ok() ? *r : Ranks{};
}

std::string error(std::string_view name, int64_t n_layers, int pp, int vpp,
                  const std::vector<int64_t>& counts = {}) {
  Result<Ranks> r = pp_ranks_holding(name, n_layers, false, pp, vpp, counts);
  EXPECT_FALSE(r.ok()) << name;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(PpPlacementTest, TwoStagesSplitTheLayersAndTheEndsGoToTheirStages) {
  EXPECT_EQ(ranks("model.embed_tokens.weight", 6, 2, 1), Ranks{0});
  EXPECT_EQ(ranks("model.layers.0.input_layernorm.weight", 6, 2, 1), Ranks{0});
  EXPECT_EQ(ranks("model.layers.2.self_attn.q_proj.weight", 6, 2, 1), Ranks{0});
  EXPECT_EQ(ranks("model.layers.3.self_attn.q_proj.weight", 6, 2, 1), Ranks{1});
  EXPECT_EQ(ranks("model.layers.5.mlp.down_proj.weight", 6, 2, 1), Ranks{1});
  EXPECT_EQ(ranks("model.norm.weight", 6, 2, 1), Ranks{1});
  EXPECT_EQ(ranks("lm_head.weight", 6, 2, 1), Ranks{1});
}

TEST(PpPlacementTest, OptimizerStateFollowsItsParameter) {
  EXPECT_EQ(ranks("optimizer.exp_avg.model.layers.4.mlp.up_proj.weight", 6, 2, 1), Ranks{1});
  EXPECT_EQ(ranks("optimizer.exp_avg_sq.model.layers.1.mlp.up_proj.weight", 6, 2, 1), Ranks{0});
  EXPECT_EQ(ranks("optimizer.exp_avg_sq.lm_head.weight", 6, 2, 1), Ranks{1});
  EXPECT_EQ(ranks("optimizer.exp_avg.model.embed_tokens.weight", 6, 2, 1), Ranks{0});
}

// pp=2, vpp=2, 8 layers: virtual stages 0..3 of 2 layers; stage s = c * pp + r is on rank s % 2.
TEST(PpPlacementTest, InterleavedStagesAlternateBetweenThePipelineRanks) {
  const Ranks want[] = {{0}, {0}, {1}, {1}, {0}, {0}, {1}, {1}};
  for (int layer = 0; layer < 8; ++layer) {
    const std::string name = "model.layers." + std::to_string(layer) + ".mlp.gate_proj.weight";
    EXPECT_EQ(ranks(name, 8, 2, 2), want[layer]) << name;
  }
  EXPECT_EQ(ranks("lm_head.weight", 8, 2, 2), Ranks{1});
  EXPECT_EQ(pp_stages_holding("lm_head.weight", 8, false, 2, 2, {}).value(), Ranks{3});
  EXPECT_EQ(pp_stages_holding("model.layers.5.mlp.gate_proj.weight", 8, false, 2, 2, {}).value(),
            Ranks{2});
  // pp=3, vpp=2: the last virtual stage, 5, is on rank 2.
  EXPECT_EQ(ranks("model.norm.weight", 6, 3, 2), Ranks{2});
  EXPECT_EQ(ranks("model.layers.3.mlp.gate_proj.weight", 6, 3, 2), Ranks{0});
}

TEST(PpPlacementTest, ExplicitCountsMoveTheCut) {
  EXPECT_EQ(ranks("model.layers.3.self_attn.o_proj.weight", 6, 2, 1, {4, 2}), Ranks{0});
  EXPECT_EQ(ranks("model.layers.4.self_attn.o_proj.weight", 6, 2, 1, {4, 2}), Ranks{1});
  EXPECT_EQ(ranks("model.layers.0.self_attn.o_proj.weight", 6, 2, 2, {1, 2, 2, 1}), Ranks{0});
  EXPECT_EQ(ranks("model.layers.1.self_attn.o_proj.weight", 6, 2, 2, {1, 2, 2, 1}), Ranks{1});
  EXPECT_EQ(ranks("model.layers.3.self_attn.o_proj.weight", 6, 2, 2, {1, 2, 2, 1}), Ranks{0});
  EXPECT_EQ(ranks("model.layers.5.self_attn.o_proj.weight", 6, 2, 2, {1, 2, 2, 1}), Ranks{1});
}

TEST(PpPlacementTest, ATiedEmbeddingIsAlsoOnTheLastStage) {
  EXPECT_EQ(ranks("model.embed_tokens.weight", 6, 2, 1, {}, true), (Ranks{0, 1}));
  EXPECT_EQ(ranks("optimizer.exp_avg.model.embed_tokens.weight", 6, 3, 1, {}, true),
            (Ranks{0, 2}));
  EXPECT_EQ(pp_stages_holding("model.embed_tokens.weight", 8, true, 2, 2, {}).value(),
            (Ranks{0, 3}));
  EXPECT_EQ(ranks("model.embed_tokens.weight", 6, 1, 1, {}, true), Ranks{0});
  EXPECT_EQ(ranks("model.embed_tokens.weight", 6, 1, 2, {}, true), Ranks{0});  // stages 0, 1
}

TEST(PpPlacementTest, UnknownNamesAndLayersOutOfRangeAreRefused) {
  for (const char* name : {"model.rotary.inv_freq", "optimizer.step", "optimizer.exp_avg",
                           "model.layers.x.mlp.up_proj.weight", "model.layers.3",
                           "model.layers.3.", "model.layers..mlp", "model.layers.-1.mlp.w",
                           "optimizer.exp_avg.optimizer.exp_avg.lm_head.weight", "norm.weight"}) {
    const std::string msg = error(name, 6, 2, 1);
    EXPECT_NE(msg.find(std::string("\"") + name + "\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("no pipeline stage"), std::string::npos) << msg;
  }
  const std::string msg = error("model.layers.6.mlp.up_proj.weight", 6, 2, 1);
  EXPECT_NE(msg.find("layer 6 is out of range for model.n_layers 6"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.layers.6.mlp.up_proj.weight"), std::string::npos) << msg;
}

TEST(PpPlacementTest, ACutThatDoesNotFitIsRefusedWithPpStageLayersMessage) {
  const std::string want = pp_stage_layers(6, 2, 1, {4, 3}).status().message();
  EXPECT_EQ(error("lm_head.weight", 6, 2, 1, {4, 3}), want);
  EXPECT_EQ(error("model.norm.weight", 7, 2, 1), pp_stage_layers(7, 2, 1, {}).status().message());
  EXPECT_EQ(error("model.norm.weight", 6, 2, 2, {3, 3}),
            pp_stage_layers(6, 2, 2, {3, 3}).status().message());
}

}  // namespace
}  // namespace ms::parallel
