// parallel::ep_rank_holding, the expert placement rule by tensor name that ms-ckpt reshard
// writes by and the trainer loads by: with E experts and ep ranks, ep rank r holds experts
// [r*E/ep, (r+1)*E/ep) of every layer, optimizer state with its parameter; the router, the
// shared expert and every dense tensor are held by all ep ranks; malformed expert names,
// experts out of range and expert counts ep does not divide are refused.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "parallel/ep_placement.h"

namespace ms::parallel {
namespace {

std::optional<int> owner(std::string_view name, int64_t num_experts, int ep) {
  Result<std::optional<int>> r = ep_rank_holding(name, num_experts, ep);
  EXPECT_TRUE(r.ok()) << name << ": " << r.status().to_string();
  return r.ok() ? *r : std::nullopt;
}

std::string error(std::string_view name, int64_t num_experts, int ep) {
  Result<std::optional<int>> r = ep_rank_holding(name, num_experts, ep);
  EXPECT_FALSE(r.ok()) << name;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

std::string expert(int layer, int e, const char* w) {
  return "model.layers." + std::to_string(layer) + ".block_sparse_moe.experts." +
         std::to_string(e) + "." + w + ".weight";
}

TEST(EpPlacementTest, EachEpRankHoldsAContiguousRunOfExperts) {
  for (int e = 0; e < 8; ++e) {
    for (const char* w : {"w1", "w2", "w3"}) {
      EXPECT_EQ(owner(expert(0, e, w), 8, 4), e / 2) << e << w;
      EXPECT_EQ(owner(expert(5, e, w), 8, 2), e / 4) << e << w;
      EXPECT_EQ(owner(expert(1, e, w), 8, 8), e) << e << w;
      EXPECT_EQ(owner(expert(1, e, w), 8, 1), 0) << e << w;
    }
  }
}

TEST(EpPlacementTest, OptimizerStateFollowsItsExpert) {
  EXPECT_EQ(owner("optimizer.exp_avg." + expert(2, 3, "w2"), 4, 2), 1);
  EXPECT_EQ(owner("optimizer.exp_avg_sq." + expert(2, 1, "w1"), 4, 2), 0);
}

TEST(EpPlacementTest, EverythingButRoutedExpertsIsHeldByEveryEpRank) {
  for (const char* name :
       {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
        "model.layers.0.block_sparse_moe.gate.weight",
        "model.layers.0.mlp.shared_expert.gate_proj.weight",
        "model.layers.1.mlp.shared_expert.down_proj.weight",
        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.post_attention_layernorm.weight",
        "optimizer.exp_avg.model.layers.0.block_sparse_moe.gate.weight"}) {
    EXPECT_EQ(owner(name, 4, 2), std::nullopt) << name;
  }
}

TEST(EpPlacementTest, MalformedExpertNamesAndExpertsOutOfRangeAreRefused) {
  for (const char* bad : {"model.layers.0.block_sparse_moe.experts.x.w1.weight",
                          "model.layers.0.block_sparse_moe.experts..w1.weight",
                          "model.layers.0.block_sparse_moe.experts.1.w4.weight",
                          "model.layers.0.block_sparse_moe.experts.1.w1.bias",
                          "model.layers.0.block_sparse_moe.experts.1",
                          "model.layers.0.block_sparse_moe.experts.-1.w1.weight",
                          "model.layers.x.block_sparse_moe.experts.1.w1.weight",
                          "layers.0.block_sparse_moe.experts.1.w1.weight"}) {
    const std::string msg = error(bad, 4, 2);
    EXPECT_NE(msg.find(std::string("\"") + bad + "\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("not an expert name"), std::string::npos) << msg;
  }
  const std::string msg = error(expert(0, 4, "w1"), 4, 2);
  EXPECT_NE(msg.find("expert 4 is out of range for model.moe.num_experts 4"), std::string::npos)
      << msg;
}

TEST(EpPlacementTest, ExpertCountsEpDoesNotDivideAreRefused) {
  for (const auto& [experts, ep] : {std::pair<int64_t, int>{6, 4}, {0, 2}, {4, 0}, {3, 2}}) {
    const std::string msg = error(expert(0, 0, "w1"), experts, ep);
    EXPECT_NE(msg.find("model.moe.num_experts " + std::to_string(experts)), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("ep " + std::to_string(ep)), std::string::npos) << msg;
  }
}

// The share a model builds (ep_local_experts) and the rank a checkpoint tensor goes to
// (ep_rank_holding) are one rule: the ranks' ranges tile the experts in order, and each
// expert's tensors go to the rank whose range holds it.
TEST(EpPlacementTest, LocalExpertRangesTileTheExpertsAndAgreeWithTheTensorRule) {
  for (const auto& [experts, ep] : {std::pair<int64_t, int>{8, 4}, {8, 1}, {6, 3}, {4, 4}}) {
    ASSERT_TRUE(ep_divides_experts(experts, ep));
    int64_t next = 0;
    for (int r = 0; r < ep; ++r) {
      const ExpertRange range = ep_local_experts(experts, ep, r);
      EXPECT_EQ(range.first, next) << experts << " experts, ep " << ep << ", rank " << r;
      EXPECT_EQ(range.count, experts / ep);
      for (int64_t x = range.first; x < range.first + range.count; ++x) {
        const Result<std::optional<int>> holder =
            ep_rank_holding(expert(1, static_cast<int>(x), "w2"), experts, ep);
        ASSERT_TRUE(holder.ok() && holder->has_value());
        EXPECT_EQ(**holder, r) << "expert " << x;
      }
      next = range.first + range.count;
    }
    EXPECT_EQ(next, experts);
  }
  for (const auto& [experts, ep] : {std::pair<int64_t, int>{6, 4}, {0, 2}, {4, 0}, {3, 2}}) {
    EXPECT_FALSE(ep_divides_experts(experts, ep)) << experts << " experts, ep " << ep;
  }
}

}  // namespace
}  // namespace ms::parallel
