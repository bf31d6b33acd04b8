// ShardSpec: which slice of a global tensor a rank holds, and how two slices overlap.
#include "comm/shard_spec.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>

namespace ms::comm {
namespace {

ShardSpec must(Result<ShardSpec> spec) {
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  return std::move(spec).value();
}

TEST(SplitRange, FirstRemainderPartsGetOneMore) {
  // 10 over 4 parts: 10 = 3 + 3 + 2 + 2.
  const int64_t offsets[] = {0, 3, 6, 8};
  const int64_t lengths[] = {3, 3, 2, 2};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(split_range(10, 4, i).offset, offsets[i]);
    EXPECT_EQ(split_range(10, 4, i).length, lengths[i]);
  }
}

TEST(SplitRange, PartsTileTheDimensionForEveryLengthAndCount) {
  for (int64_t length = 0; length <= 13; ++length) {
    for (int parts = 1; parts <= 6; ++parts) {
      int64_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const SplitRange range = split_range(length, parts, i);
        EXPECT_EQ(range.offset, next) << length << " over " << parts << ", part " << i;
        EXPECT_TRUE(range.length == length / parts || range.length == length / parts + 1);
        next += range.length;
      }
      EXPECT_EQ(next, length);
    }
  }
}

TEST(ShardSpec, ReplicatedHoldsEverything) {
  const ShardSpec spec = ShardSpec::replicated({4, 6});
  EXPECT_TRUE(spec.is_replicated());
  EXPECT_TRUE(spec.is_whole_box());
  EXPECT_EQ(spec.numel(), 24);
  EXPECT_EQ(spec.global_numel(), 24);
  EXPECT_TRUE(spec.contains({3, 5}));
  EXPECT_EQ(spec.to_string(), "global [4,6] offsets [0,0] lengths [4,6]");
}

TEST(ShardSpec, ScalarIsOneElement) {
  const ShardSpec spec = ShardSpec::replicated({});
  EXPECT_EQ(spec.numel(), 1);
  EXPECT_TRUE(spec.contains({}));
  EXPECT_FALSE(spec.contains({0}));
}

TEST(ShardSpec, SplitTakesOnePartOfOneDimension) {
  const ShardSpec spec = must(ShardSpec::split({8, 6}, 1, 2, 1));
  EXPECT_EQ(spec.offsets(), (Shape{0, 3}));
  EXPECT_EQ(spec.lengths(), (Shape{8, 3}));
  EXPECT_EQ(spec.numel(), 24);
  EXPECT_FALSE(spec.is_replicated());
  EXPECT_TRUE(spec.contains({7, 3}));
  EXPECT_FALSE(spec.contains({7, 2}));
  EXPECT_FALSE(spec.contains({8, 3}));
  EXPECT_FALSE(spec.contains({1}));  // wrong number of dimensions
  EXPECT_EQ(spec.to_string(), "global [8,6] offsets [0,3] lengths [8,3]");
}

TEST(ShardSpec, UnevenSplitFollowsSplitRange) {
  const ShardSpec last = must(ShardSpec::split({10, 2}, 0, 4, 3));
  EXPECT_EQ(last.offsets(), (Shape{8, 0}));
  EXPECT_EQ(last.lengths(), (Shape{2, 2}));
}

TEST(ShardSpec, SplitRejectsBadArguments) {
  EXPECT_EQ(ShardSpec::split({8, 6}, 2, 2, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardSpec::split({8, 6}, -1, 2, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardSpec::split({8, 6}, 0, 0, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardSpec::split({8, 6}, 0, 2, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardSpec::split({8, -6}, 0, 2, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShardSpec, BoxMustFitTheGlobalShape) {
  EXPECT_TRUE(ShardSpec::box({4, 4}, {1, 2}, {3, 2}).ok());
  const Status too_long = ShardSpec::box({4, 4}, {1, 2}, {3, 3}).status();
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("[4,4]"), std::string::npos) << too_long.message();
  EXPECT_FALSE(ShardSpec::box({4, 4}, {1}, {3}).ok());
  EXPECT_FALSE(ShardSpec::box({4, 4}, {-1, 0}, {1, 1}).ok());
}

TEST(ShardSpec, FlatRangeIsAContiguousRunOfTheFlattenedTensor) {
  const ShardSpec spec = must(ShardSpec::flat_range({4, 6}, 5, 14));
  EXPECT_EQ(spec.numel(), 9);
  EXPECT_FALSE(spec.is_whole_box());
  EXPECT_FALSE(spec.is_replicated());
  EXPECT_FALSE(spec.contains({0, 4}));  // flat index 4
  EXPECT_TRUE(spec.contains({0, 5}));   // 5
  EXPECT_TRUE(spec.contains({2, 1}));   // 13
  EXPECT_FALSE(spec.contains({2, 2}));  // 14
  EXPECT_EQ(spec.to_string(), "global [4,6] offsets [0,0] lengths [4,6] flat [5,14)");
}

TEST(ShardSpec, FlatRangeOfATensorParallelShard) {
  // ZeRO over a tp shard: elements [2, 7) of the 4x3 right half of a 4x6 tensor.
  const ShardSpec half = must(ShardSpec::split({4, 6}, 1, 2, 1));
  const ShardSpec spec = must(half.with_flat_range(2, 7));
  EXPECT_EQ(spec.numel(), 5);
  EXPECT_TRUE(spec.contains({0, 5}));   // local 2
  EXPECT_TRUE(spec.contains({2, 3}));   // local 6
  EXPECT_FALSE(spec.contains({2, 4}));  // local 7
  EXPECT_FALSE(spec.contains({0, 2}));  // outside the box
}

TEST(ShardSpec, FlatRangeRejectsBadRanges) {
  const ShardSpec whole = ShardSpec::replicated({4, 6});
  EXPECT_FALSE(whole.with_flat_range(-1, 3).ok());
  EXPECT_FALSE(whole.with_flat_range(4, 3).ok());
  EXPECT_FALSE(whole.with_flat_range(0, 25).ok());
  const ShardSpec range = must(whole.with_flat_range(0, 10));
  EXPECT_EQ(range.with_flat_range(0, 5).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShardSpec, EqualityComparesEveryField) {
  EXPECT_EQ(must(ShardSpec::split({8, 6}, 0, 2, 0)), must(ShardSpec::box({8, 6}, {0, 0}, {4, 6})));
  EXPECT_NE(must(ShardSpec::split({8, 6}, 0, 2, 0)), must(ShardSpec::split({8, 6}, 0, 2, 1)));
  EXPECT_NE(ShardSpec::replicated({24}), must(ShardSpec::flat_range({24}, 0, 12)));
  EXPECT_EQ(ShardSpec::replicated({24}), must(ShardSpec::flat_range({24}, 0, 24)));
}

TEST(Intersect, TwoTensorParallelLayouts) {
  // Rows [0,3) of tp=2 meet rows [2,4) of tp=3 in row 2.
  const ShardSpec a = must(ShardSpec::split({6, 4}, 0, 2, 0));
  const ShardSpec b = must(ShardSpec::split({6, 4}, 0, 3, 1));
  auto both = intersect(a, b);
  ASSERT_TRUE(both.ok()) << both.status().to_string();
  ASSERT_TRUE(both->has_value());
  EXPECT_EQ(**both, must(ShardSpec::box({6, 4}, {2, 0}, {1, 4})));
}

TEST(Intersect, DisjointShardsShareNothing) {
  auto none =
      intersect(must(ShardSpec::split({6, 4}, 1, 2, 0)), must(ShardSpec::split({6, 4}, 1, 2, 1)));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(Intersect, FlatRangesOfTheSameBox) {
  auto both =
      intersect(must(ShardSpec::flat_range({24}, 0, 12)), must(ShardSpec::flat_range({24}, 8, 20)));
  ASSERT_TRUE(both.ok());
  ASSERT_TRUE(both->has_value());
  EXPECT_EQ(**both, must(ShardSpec::flat_range({24}, 8, 12)));
  auto none =
      intersect(must(ShardSpec::flat_range({24}, 0, 8)), must(ShardSpec::flat_range({24}, 8, 20)));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(Intersect, RangeInsideAWholeBoxIsTheRange) {
  const ShardSpec range = must(must(ShardSpec::split({4, 6}, 1, 2, 1)).with_flat_range(1, 5));
  auto both = intersect(ShardSpec::replicated({4, 6}), range);
  ASSERT_TRUE(both.ok());
  ASSERT_TRUE(both->has_value());
  EXPECT_EQ(**both, range);
}

TEST(Intersect, RangesOfDifferentBoxesNeedOverlapRuns) {
  const ShardSpec a = must(ShardSpec::flat_range({4, 6}, 3, 15));
  const ShardSpec b = must(ShardSpec::split({4, 6}, 1, 2, 0));
  const Status status = intersect(a, b).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("overlap_runs"), std::string::npos) << status.message();
}

TEST(Intersect, DifferentTensorsAreAnError) {
  const Status status =
      intersect(ShardSpec::replicated({4, 6}), ShardSpec::replicated({6, 4})).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("[6,4]"), std::string::npos);
}

TEST(OverlapRuns, ColumnSplitsOverlapInOneColumnPerRow) {
  // a holds columns [0,3) (3 per row), b holds columns [2,6) (4 per row): column 2 is shared.
  const ShardSpec a = must(ShardSpec::split({4, 6}, 1, 2, 0));
  const ShardSpec b = must(ShardSpec::box({4, 6}, {0, 2}, {4, 4}));
  auto runs = overlap_runs(a, b);
  ASSERT_TRUE(runs.ok());
  const std::vector<OverlapRun> expected = {{2, 0, 1}, {5, 4, 1}, {8, 8, 1}, {11, 12, 1}};
  EXPECT_EQ(*runs, expected);
}

TEST(OverlapRuns, RowBlockAgainstFlatRangeMergesIntoOneRun) {
  // Rows 1..2 of a 4x6 tensor are global elements [6,18); b holds [4,20).
  const ShardSpec rows = must(ShardSpec::box({4, 6}, {1, 0}, {2, 6}));
  const ShardSpec range = must(ShardSpec::flat_range({4, 6}, 4, 20));
  auto runs = overlap_runs(rows, range);
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(*runs, (std::vector<OverlapRun>{{0, 2, 12}}));
}

TEST(OverlapRuns, ScalarsOverlapInTheirOneElement) {
  auto runs = overlap_runs(ShardSpec::replicated({}), ShardSpec::replicated({}));
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(*runs, (std::vector<OverlapRun>{{0, 0, 1}}));
}

// Local position of every global element a spec holds, by enumeration: the reference that
// overlap_runs must agree with.
std::vector<int64_t> local_positions(const ShardSpec& spec) {
  std::vector<int64_t> local(spec.global_numel(), -1);
  const Shape& shape = spec.global_shape();
  int64_t next = 0;
  for (int64_t flat = 0; flat < spec.global_numel(); ++flat) {
    Shape index(shape.size());
    int64_t rest = flat;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      index[d] = rest % shape[d];
      rest /= shape[d];
    }
    if (spec.contains(index)) local[flat] = next++;
  }
  EXPECT_EQ(next, spec.numel());
  return local;
}

ShardSpec random_spec(std::mt19937& rng, const Shape& shape) {
  auto pick = [&rng](int64_t n) { return std::uniform_int_distribution<int64_t>(0, n)(rng); };
  Shape offsets;
  Shape lengths;
  for (int64_t d : shape) {
    const int64_t offset = pick(d - 1);
    offsets.push_back(offset);
    lengths.push_back(1 + pick(d - offset - 1));
  }
  ShardSpec box = must(ShardSpec::box(shape, offsets, lengths));
  if (pick(1) == 0) return box;
  const int64_t begin = pick(box.numel());
  return must(box.with_flat_range(begin, begin + pick(box.numel() - begin)));
}

TEST(OverlapRuns, AgreesWithElementByElementEnumeration) {
  std::mt19937 rng(1234);
  const Shape shapes[] = {{7}, {3, 5}, {2, 3, 4}};
  for (const Shape& shape : shapes) {
    for (int trial = 0; trial < 200; ++trial) {
      const ShardSpec a = random_spec(rng, shape);
      const ShardSpec b = random_spec(rng, shape);
      const std::vector<int64_t> in_a = local_positions(a);
      const std::vector<int64_t> in_b = local_positions(b);
      std::vector<std::pair<int64_t, int64_t>> expected;
      for (size_t g = 0; g < in_a.size(); ++g) {
        if (in_a[g] >= 0 && in_b[g] >= 0) expected.emplace_back(in_a[g], in_b[g]);
      }
      auto runs = overlap_runs(a, b);
      ASSERT_TRUE(runs.ok());
      std::vector<std::pair<int64_t, int64_t>> actual;
      for (const OverlapRun& run : *runs) {
        for (int64_t k = 0; k < run.length; ++k) {
          actual.emplace_back(run.a_offset + k, run.b_offset + k);
        }
      }
      ASSERT_EQ(actual, expected) << a.to_string() << " vs " << b.to_string();
      // Where intersect() can answer, it holds exactly the shared elements.
      auto both = intersect(a, b);
      if (!both.ok()) continue;
      if (!both->has_value()) {
        EXPECT_TRUE(expected.empty()) << a.to_string() << " vs " << b.to_string();
        continue;
      }
      const std::vector<int64_t> in_both = local_positions(**both);
      for (size_t g = 0; g < in_both.size(); ++g) {
        EXPECT_EQ(in_both[g] >= 0, in_a[g] >= 0 && in_b[g] >= 0) << (*both)->to_string();
      }
    }
  }
}

}  // namespace
}  // namespace ms::comm
