// The pure tensor-parallel layout rules: even slices, refusals naming the rule, vocabulary
// padding and the model layout rule (heads, key/value heads, d_ff by config key).
#include <gtest/gtest.h>

#include "comm/shard_spec.h"
#include "parallel/tp_layout.h"
#include "parallel/vocab_parallel.h"

namespace ms::parallel {
namespace {

TEST(TpSlice, ContiguousEvenSlices) {
  EXPECT_EQ(*tp_slice(20, 4, 3, "out"), (TpSlice{15, 5}));
  EXPECT_EQ(*tp_slice(20, 4, 0, "out"), (TpSlice{0, 5}));
  EXPECT_EQ(*tp_slice(7, 1, 0, "out"), (TpSlice{0, 7}));
  EXPECT_EQ(*tp_slice(0, 2, 1, "out"), (TpSlice{0, 0}));
}

TEST(TpSlice, AgreesWithShardSpecSplitWhenTpDivides) {
  for (int64_t global : {4, 8, 12, 20, 36}) {
    for (int tp : {1, 2, 4}) {
      for (int r = 0; r < tp; ++r) {
        const comm::SplitRange want = comm::split_range(global, tp, r);
        EXPECT_EQ(*tp_slice(global, tp, r, "x"), (TpSlice{want.offset, want.length}))
            << global << " over " << tp << " rank " << r;
      }
    }
  }
}

TEST(TpSlice, RefusesWhatTpDoesNotDivideNamingTheRule) {
  const auto refused = tp_slice(10, 4, 0, "d_ff");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("tp (4) must divide d_ff (10)"), std::string::npos)
      << refused.status().message();
}

TEST(TpSlice, RefusesBadTpAndRank) {
  EXPECT_EQ(tp_slice(8, 0, 0, "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tp_slice(8, 2, 2, "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tp_slice(8, 2, -1, "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tp_slice(-4, 2, 0, "x").status().code(), StatusCode::kInvalidArgument);
}

TEST(VocabPadding, PadsToTheNextMultipleOfTp) {
  EXPECT_EQ(padded_vocab(37, 4), 40);
  EXPECT_EQ(padded_vocab(40, 4), 40);
  EXPECT_EQ(padded_vocab(5, 4), 8);
  EXPECT_EQ(padded_vocab(37, 1), 37);
  EXPECT_EQ(padded_vocab(1, 2), 2);
}

TEST(VocabPadding, ShardsCoverThePaddedVocabularyOnce) {
  for (int64_t vocab : {1, 5, 37, 40}) {
    for (int tp : {1, 2, 4}) {
      int64_t next = 0;
      int64_t real = 0;
      for (int r = 0; r < tp; ++r) {
        const VocabShard s = *vocab_shard(vocab, tp, r);
        EXPECT_EQ(s.begin, next);
        EXPECT_EQ(s.length * tp, s.padded);
        real += s.real_end() - s.begin;
        next += s.length;
      }
      EXPECT_EQ(next, padded_vocab(vocab, tp));
      EXPECT_EQ(real, vocab) << vocab << " over " << tp;
    }
  }
}

TEST(VocabPadding, ARankMayHoldOnlyPadding) {
  // 5 tokens over 4 ranks: padded to 8, rank 3 holds ids 6 and 7, both padding.
  const VocabShard last = *vocab_shard(5, 4, 3);
  EXPECT_EQ(last.begin, 6);
  EXPECT_EQ(last.real_end(), 6);
  const VocabShard third = *vocab_shard(5, 4, 2);
  EXPECT_EQ(third.real_end(), 5);
  EXPECT_TRUE(third.holds(5));
  EXPECT_FALSE(third.holds(6));
}

TEST(VocabPadding, RefusesEmptyVocabularyAndBadRank) {
  EXPECT_EQ(vocab_shard(0, 2, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(vocab_shard(8, 2, 2).status().code(), StatusCode::kInvalidArgument);
}

// The message a user gets for a model tp cannot split: the key, both sizes and the rule.
void expect_refused(const Status& s, const std::string& text) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(text), std::string::npos) << s.message();
}

TEST(TpModelRule, AcceptsLayoutsTpDivides) {
  for (int tp : {1, 2, 4}) {
    EXPECT_TRUE(check_tp_model({8, 4, 1376, 0}, tp).ok()) << tp;
    EXPECT_TRUE(check_tp_model({8, 8, 64, 32}, tp).ok()) << tp;
  }
  EXPECT_TRUE(check_tp_model({6, 3, 10, 0}, 1).ok());
  EXPECT_TRUE(check_tp_model({12, 4, 12, 0}, 4).ok());
}

TEST(TpModelRule, RefusesHeadsTpDoesNotDivide) {
  expect_refused(check_tp_model({6, 6, 64, 0}, 4),
                 "model.n_heads: tensor parallelism splits the query heads whole, so tp (4) must "
                 "divide model.n_heads (6)");
  expect_refused(check_tp_model({6, 2, 64, 0}, 4), "tp (4) must divide model.n_heads (6)");
}

TEST(TpModelRule, RefusesKeyValueHeadsTpDoesNotDivideNamingTheQueryGroups) {
  // 8 heads split over 4 ranks, but 2 key/value heads cannot: a rank would hold half a group.
  expect_refused(check_tp_model({8, 2, 64, 0}, 4), "tp (4) must divide model.n_kv_heads (2)");
  expect_refused(check_tp_model({8, 2, 64, 0}, 4), "whole query groups");
  expect_refused(check_tp_model({4, 1, 64, 0}, 2), "model.n_kv_heads");
  EXPECT_TRUE(check_tp_model({8, 2, 64, 0}, 2).ok());
}

TEST(TpModelRule, RefusesHiddenWidthsTpDoesNotDivide) {
  expect_refused(check_tp_model({8, 4, 10, 0}, 4), "tp (4) must divide model.d_ff (10)");
  expect_refused(check_tp_model({8, 4, 12, 6}, 4),
                 "tp (4) must divide model.moe.shared_expert_d_ff (6)");
  EXPECT_TRUE(check_tp_model({8, 4, 12, 6}, 2).ok());
}

TEST(TpModelRule, RefusesMalformedModelsAndTp) {
  expect_refused(check_tp_model({8, 3, 64, 0}, 1),
                 "model.n_kv_heads (3) must divide model.n_heads (8)");
  expect_refused(check_tp_model({0, 1, 64, 0}, 1), "model.n_heads must be >= 1");
  expect_refused(check_tp_model({8, 0, 64, 0}, 1), "model.n_kv_heads must be >= 1");
  expect_refused(check_tp_model({8, 4, 0, 0}, 1), "model.d_ff must be >= 1");
  expect_refused(check_tp_model({8, 4, 64, -1}, 1), "model.moe.shared_expert_d_ff");
  expect_refused(check_tp_model({8, 4, 64, 0}, 0), "tp >= 1");
}

}  // namespace
}  // namespace ms::parallel
