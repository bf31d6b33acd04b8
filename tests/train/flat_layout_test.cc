// Bucket assignment in reverse parameter order and ZeRO-1 ownership with uneven sizes.
#include "train/flat_layout.h"

#include <gtest/gtest.h>

#include <vector>

namespace ms::train {
namespace {

// Parameters of 10, 3, 7 and 5 elements, dp 2, buckets of 8 floats (32 bytes). Reverse order:
// p3 (5) + p2 (7) = 12 >= 8 closes bucket 0 at offset 0 (12, already even); p1 (3) + p0 (10)
// = 13 closes bucket 1, padded to 14, at offset 12. Total 26, shards of 13.
FlatLayout example() {
  const std::vector<int64_t> numels = {10, 3, 7, 5};
  Result<FlatLayout> layout = FlatLayout::build(numels, 2, 32);
  EXPECT_TRUE(layout.ok()) << layout.status().to_string();
  return *layout;
}

TEST(FlatLayout, BucketsFollowReverseParameterOrderAndPadToDp) {
  const FlatLayout layout = example();
  ASSERT_EQ(layout.buckets().size(), 2u);
  EXPECT_EQ(layout.buckets()[0].params, (std::vector<size_t>{3, 2}));
  EXPECT_EQ(layout.buckets()[1].params, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(layout.buckets()[0].numel, 12);
  EXPECT_EQ(layout.buckets()[1].offset, 12);
  EXPECT_EQ(layout.buckets()[1].numel, 14);
  EXPECT_EQ(layout.buckets()[1].shard_offset, 6);
  EXPECT_EQ(layout.total_numel(), 26);
  EXPECT_EQ(layout.shard_numel(), 13);
  EXPECT_EQ(layout.param_offset(3), 0);
  EXPECT_EQ(layout.param_offset(2), 5);
  EXPECT_EQ(layout.param_offset(1), 12);
  EXPECT_EQ(layout.param_offset(0), 15);
  EXPECT_EQ(layout.bucket_of(0), 1u);
  EXPECT_EQ(layout.bucket_of(3), 0u);
}

TEST(FlatLayout, EachRankOwnsOneRangeOfEachBucket) {
  const FlatLayout layout = example();
  // Rank 0: bucket 0 [0, 6) = p3 whole + p2 [0, 1); bucket 1 [12, 19) = p1 whole + p0 [0, 4).
  EXPECT_EQ(layout.shard_segments(0), (std::vector<ShardSegment>{
                                          {3, 0, 5, 0, 0},
                                          {2, 0, 1, 5, 5},
                                          {1, 0, 3, 12, 6},
                                          {0, 0, 4, 15, 9},
                                      }));
  // Rank 1: bucket 0 [6, 12) = p2 [1, 7); bucket 1 [19, 26) = p0 [4, 10) and one pad element.
  EXPECT_EQ(layout.shard_segments(1), (std::vector<ShardSegment>{
                                          {2, 1, 7, 6, 0},
                                          {0, 4, 10, 19, 6},
                                      }));
}

TEST(FlatLayout, EveryElementIsOwnedExactlyOnceForUnevenSizes) {
  const std::vector<int64_t> numels = {1, 17, 0, 33, 5, 64, 3, 2};
  for (int dp = 1; dp <= 5; ++dp) {
    for (const int64_t bucket_bytes : {4, 40, 100, 1 << 20}) {
      Result<FlatLayout> layout = FlatLayout::build(numels, dp, bucket_bytes);
      ASSERT_TRUE(layout.ok());
      EXPECT_EQ(layout->total_numel() % dp, 0);
      std::vector<std::vector<int>> seen(numels.size());
      for (size_t p = 0; p < numels.size(); ++p) seen[p].assign(numels[p], 0);
      for (int r = 0; r < dp; ++r) {
        for (const ShardSegment& s : layout->shard_segments(r)) {
          EXPECT_LT(s.shard_offset + s.length(), layout->shard_numel() + 1);
          for (int64_t e = s.param_begin; e < s.param_end; ++e) ++seen[s.param][e];
        }
      }
      for (size_t p = 0; p < numels.size(); ++p) {
        for (const int count : seen[p]) EXPECT_EQ(count, 1) << "dp " << dp << " param " << p;
      }
    }
  }
}

TEST(FlatLayout, AParameterLargerThanABucketGetsOneOfItsOwn) {
  const std::vector<int64_t> numels = {4, 1000, 4};
  Result<FlatLayout> layout = FlatLayout::build(numels, 1, 64);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->buckets().size(), 2u);
  EXPECT_EQ(layout->buckets()[0].params, (std::vector<size_t>{2, 1}));
  EXPECT_EQ(layout->buckets()[1].params, (std::vector<size_t>{0}));
}

TEST(FlatLayout, RefusesBadSizes) {
  const std::vector<int64_t> numels = {4};
  EXPECT_FALSE(FlatLayout::build(numels, 0, 64).ok());
  const Result<FlatLayout> no_bucket = FlatLayout::build(numels, 1, 0);
  ASSERT_FALSE(no_bucket.ok());
  EXPECT_NE(no_bucket.status().message().find("train.bucket_mb"), std::string::npos);
  const std::vector<int64_t> negative = {-1};
  EXPECT_FALSE(FlatLayout::build(negative, 1, 64).ok());
}

TEST(FlatLayout, ZeroSegmentsBecomeFlatRangesOfTheParameter) {
  const comm::ShardSpec whole = comm::ShardSpec::replicated({2, 5});
  Result<comm::ShardSpec> spec = zero_shard_spec(whole, {0, 4, 10, 19, 6});
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->flat_begin(), 4);
  EXPECT_EQ(spec->flat_end(), 10);
  EXPECT_EQ(spec->global_shape(), (comm::Shape{2, 5}));
}

}  // namespace
}  // namespace ms::train
