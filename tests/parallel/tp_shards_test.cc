// The tensor-parallel placement rule by name: which tensors split along which dimension, the
// vocabulary split over the padded vocabulary without storing padding, optimizer state
// following its parameter, and the refusals.
#include <gtest/gtest.h>

#include "parallel/tp_shards.h"

namespace ms::parallel {
namespace {

TEST(TpShards, SplitByName) {
  EXPECT_EQ(tp_split_of("model.layers.3.self_attn.q_proj.weight"), TpSplit::kRows);
  EXPECT_EQ(tp_split_of("model.layers.3.self_attn.k_proj.weight"), TpSplit::kRows);
  EXPECT_EQ(tp_split_of("model.layers.3.self_attn.v_proj.weight"), TpSplit::kRows);
  EXPECT_EQ(tp_split_of("model.layers.3.self_attn.o_proj.weight"), TpSplit::kColumns);
  EXPECT_EQ(tp_split_of("model.layers.0.mlp.gate_proj.weight"), TpSplit::kRows);
  EXPECT_EQ(tp_split_of("model.layers.0.mlp.up_proj.weight"), TpSplit::kRows);
  EXPECT_EQ(tp_split_of("model.layers.0.mlp.down_proj.weight"), TpSplit::kColumns);
  EXPECT_EQ(tp_split_of("model.layers.0.mlp.shared_expert.gate_proj.weight"), TpSplit::kRows);
  EXPECT_EQ(tp_split_of("model.layers.0.mlp.shared_expert.down_proj.weight"), TpSplit::kColumns);
  EXPECT_EQ(tp_split_of("model.layers.1.block_sparse_moe.experts.7.w1.weight"), TpSplit::kRows);
  EXPECT_EQ(tp_split_of("model.layers.1.block_sparse_moe.experts.7.w3.weight"), TpSplit::kRows);
  EXPECT_EQ(tp_split_of("model.layers.1.block_sparse_moe.experts.7.w2.weight"), TpSplit::kColumns);
  EXPECT_EQ(tp_split_of("model.layers.1.block_sparse_moe.gate.weight"), TpSplit::kReplicated);
  EXPECT_EQ(tp_split_of("model.layers.1.input_layernorm.weight"), TpSplit::kReplicated);
  EXPECT_EQ(tp_split_of("model.layers.1.post_attention_layernorm.weight"), TpSplit::kReplicated);
  EXPECT_EQ(tp_split_of("model.norm.weight"), TpSplit::kReplicated);
  EXPECT_EQ(tp_split_of("model.embed_tokens.weight"), TpSplit::kVocab);
  EXPECT_EQ(tp_split_of("lm_head.weight"), TpSplit::kVocab);
}

TEST(TpShards, OptimizerStateFollowsItsParameter) {
  EXPECT_EQ(tp_split_of("optimizer.exp_avg.model.layers.0.self_attn.o_proj.weight"),
            TpSplit::kColumns);
  EXPECT_EQ(tp_split_of("optimizer.exp_avg_sq.lm_head.weight"), TpSplit::kVocab);
  EXPECT_EQ(tp_split_of("optimizer.exp_avg_sq.model.norm.weight"), TpSplit::kReplicated);
}

TEST(TpShards, RowsAndColumnsSplitEvenly) {
  const auto q = tp_shard("model.layers.0.self_attn.q_proj.weight", {8, 6}, 2, 1);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->offsets(), (comm::Shape{4, 0}));
  EXPECT_EQ(q->lengths(), (comm::Shape{4, 6}));
  const auto o = tp_shard("model.layers.0.self_attn.o_proj.weight", {6, 8}, 4, 3);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->offsets(), (comm::Shape{0, 6}));
  EXPECT_EQ(o->lengths(), (comm::Shape{6, 2}));
  const auto norm = tp_shard("model.norm.weight", {6}, 4, 3);
  ASSERT_TRUE(norm.ok());
  EXPECT_TRUE(norm->is_replicated());
}

TEST(TpShards, VocabularyRowsAreTheRealIdsOfThePaddedRange) {
  // V = 10 over tp = 4: Vp = 12, ranges of 3 ids; rank 3 holds id 9 only (10, 11 are padding).
  const int64_t want_offset[] = {0, 3, 6, 9}, want_length[] = {3, 3, 3, 1};
  for (int r = 0; r < 4; ++r) {
    const auto s = tp_shard("model.embed_tokens.weight", {10, 5}, 4, r);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->offsets()[0], want_offset[r]) << r;
    EXPECT_EQ(s->lengths()[0], want_length[r]) << r;
    EXPECT_EQ(s->lengths()[1], 5);
  }
  // V = 5 over tp = 4: Vp = 8; rank 3's ids 6 and 7 are all padding: an empty slice.
  const auto empty = tp_shard("lm_head.weight", {5, 2}, 4, 3);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->numel(), 0);
}

TEST(TpShards, RefusesNamingTheTensorAndTheRule) {
  const auto bad = tp_shard("model.layers.0.mlp.down_proj.weight", {4, 6}, 4, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("down_proj"), std::string::npos);
  EXPECT_NE(bad.status().message().find("tp (4) must divide"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(tp_shard("model.norm.weight", {4}, 0, 0).ok());
  EXPECT_FALSE(tp_shard("model.norm.weight", {4}, 2, 2).ok());
  EXPECT_FALSE(tp_shard("lm_head.weight", {4}, 2, 0).ok());
}

}  // namespace
}  // namespace ms::parallel
