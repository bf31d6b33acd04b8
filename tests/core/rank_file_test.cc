// The per-rank file name every writer and reader shares.
#include "core/rank_file.h"

#include <gtest/gtest.h>

namespace ms {
namespace {

TEST(RankFileName, FiveDigitsThenTheExtension) {
  EXPECT_EQ(rank_file_name(3, ".jsonl"), "rank-00003.jsonl");
  EXPECT_EQ(rank_file_name(0, ".data"), "rank-00000.data");
  EXPECT_EQ(rank_file_name(123456, ".json"), "rank-123456.json");
}

TEST(RankFileName, RecognizesOnlyDigitsAndTheExactExtension) {
  EXPECT_TRUE(is_rank_file_name("rank-00003.jsonl", ".jsonl"));
  EXPECT_TRUE(is_rank_file_name(rank_file_name(77, ".json"), ".json"));
  EXPECT_FALSE(is_rank_file_name("rank-00003.jsonl", ".json"));
  EXPECT_FALSE(is_rank_file_name("rank-.jsonl", ".jsonl"));
  EXPECT_FALSE(is_rank_file_name("rank-0a003.jsonl", ".jsonl"));
  EXPECT_FALSE(is_rank_file_name("rank-00003.jsonl.tmp", ".jsonl"));
  EXPECT_FALSE(is_rank_file_name("rank-", "-"));
  EXPECT_FALSE(is_rank_file_name("notes.txt", ".jsonl"));
}

}  // namespace
}  // namespace ms
