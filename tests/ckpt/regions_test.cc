// Box arithmetic behind the checkpoint planner and loader: flat ranges become regular boxes
// that cover exactly the range, in order; boxes split along rows; overlaps copy correctly.
#include <gtest/gtest.h>

#include <climits>
#include <numeric>
#include <span>

#include "ckpt/regions.h"

namespace ms::ckpt {
namespace {

// Flat row-major indices of every element of `box` within a tensor of `shape`, in box order.
std::vector<int64_t> flat_indices(const Box& box, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out;
  std::vector<int64_t> index = box.offsets;
  for (int64_t n = 0; n < box.numel(); ++n) {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
    out.push_back(flat);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < box.offsets[d] + box.lengths[d]) break;
      index[d] = box.offsets[d];
    }
  }
  return out;
}

TEST(SpecBoxes, EveryFlatRangeOfA3dTensorIsCoveredInOrder) {
  const std::vector<int64_t> shape = {3, 4, 5};
  for (int64_t begin = 0; begin <= 60; begin += 7) {
    for (int64_t end = begin; end <= 60; end += 5) {
      auto spec = comm::ShardSpec::flat_range(shape, begin, end);
      ASSERT_TRUE(spec.ok());
      std::vector<int64_t> seen;
      int64_t local = 0;
      const std::vector<LocalBox> boxes = spec_boxes(*spec);
      for (const LocalBox& b : boxes) {
        EXPECT_EQ(b.local_offset, local);
        for (int64_t i : flat_indices(b.box, shape)) seen.push_back(i);
        local += b.box.numel();
      }
      std::vector<int64_t> want(static_cast<size_t>(end - begin));
      std::iota(want.begin(), want.end(), begin);
      EXPECT_EQ(seen, want) << begin << ".." << end;
      EXPECT_LE(boxes.size(), 2u * shape.size());
    }
  }
}

TEST(SpecBoxes, PartialRowsAroundWholeRows) {
  auto spec = comm::ShardSpec::flat_range({4, 10}, 7, 33);
  ASSERT_TRUE(spec.ok());
  const std::vector<LocalBox> boxes = spec_boxes(*spec);
  ASSERT_EQ(boxes.size(), 3u);
  EXPECT_EQ(boxes[0].box, (Box{{0, 7}, {1, 3}}));
  EXPECT_EQ(boxes[1].box, (Box{{1, 0}, {2, 10}}));
  EXPECT_EQ(boxes[2].box, (Box{{3, 0}, {1, 3}}));
}

TEST(SpecBoxes, WholeTensorAndScalarAreOneBox) {
  EXPECT_EQ(spec_boxes(comm::ShardSpec::replicated({6, 2})).size(), 1u);
  const auto scalar = spec_boxes(comm::ShardSpec::replicated({}));
  ASSERT_EQ(scalar.size(), 1u);
  EXPECT_TRUE(scalar[0].box.offsets.empty());
  auto empty = comm::ShardSpec::flat_range({4}, 2, 2);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(spec_boxes(*empty).empty());
}

TEST(SplitBox, CutsAlongTheFirstLongDimension) {
  const std::vector<Box> pieces = split_box(Box{{0, 2, 0}, {1, 5, 4}}, 8);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], (Box{{0, 2, 0}, {1, 2, 4}}));
  EXPECT_EQ(pieces[2], (Box{{0, 6, 0}, {1, 1, 4}}));
  EXPECT_EQ(split_box(Box{{0}, {3}}, 100).size(), 1u);
}

TEST(CopyRegion, CopiesTheOverlapBetweenTwoBoxes) {
  const Box src_box{{0, 0}, {4, 4}};
  std::vector<float> src(16);
  std::iota(src.begin(), src.end(), 0.0f);
  const Box dst_box{{1, 2}, {3, 2}};
  std::vector<float> dst(6, -1.0f);
  const auto region = intersect_boxes(src_box, dst_box);
  ASSERT_TRUE(region.has_value());
  ASSERT_TRUE(copy_region(*region, src_box, std::as_bytes(std::span(src)), dst_box,
                          std::as_writable_bytes(std::span(dst)), sizeof(float))
                  .ok());
  EXPECT_EQ(dst, (std::vector<float>{6, 7, 10, 11, 14, 15}));
  EXPECT_FALSE(intersect_boxes(Box{{0}, {2}}, Box{{2}, {2}}).has_value());
}

// The copier refuses what would read or write outside its buffers instead of doing it.
TEST(CopyRegion, RefusesRegionsOutsideABoxAndBuffersOfTheWrongSize) {
  std::vector<float> src(16, 1.0f), dst(6, -1.0f);
  const Box src_box{{0, 0}, {4, 4}};
  const Box dst_box{{1, 2}, {3, 2}};
  const auto in = std::as_bytes(std::span(src));
  const auto out = std::as_writable_bytes(std::span(dst));
  Status s = copy_region(Box{{0, 0}, {2, 2}}, src_box, in, dst_box, out, sizeof(float));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[0:2, 0:2]"), std::string::npos) << s.message();
  s = copy_region(Box{{1, 2}, {3, 2}}, src_box, in.first(60), dst_box, out, sizeof(float));
  EXPECT_NE(s.message().find("needs 64 bytes, its buffer holds 60"), std::string::npos)
      << s.message();
  // An end that overflows int64 is outside, not a wrapped small number.
  const Box huge{{1, INT64_MAX}, {1, 2}};
  EXPECT_FALSE(copy_region(huge, huge, in, huge, out, sizeof(float)).ok());
  EXPECT_EQ(dst, std::vector<float>(6, -1.0f)) << "nothing may be written on refusal";
}

std::optional<TilingProblem> tiling(std::vector<int64_t> shape, std::vector<Box> boxes) {
  return find_tiling_problem(shape, boxes);
}

TEST(Tiling, RowSlabsColumnSplitsAndFlatRangesTile) {
  EXPECT_FALSE(tiling({4, 3}, {Box{{0, 0}, {2, 3}}, Box{{2, 0}, {2, 3}}}));
  EXPECT_FALSE(tiling({4, 6}, {Box{{0, 3}, {4, 3}}, Box{{0, 0}, {4, 3}}}));
  // The boxes ZeRO flat ranges of a [3, 4, 5] tensor decompose into, three ranks.
  std::vector<Box> boxes;
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 23}, {23, 41}, {41, 60}}) {
    for (const LocalBox& lb : spec_boxes(*comm::ShardSpec::flat_range({3, 4, 5}, b, e))) {
      boxes.push_back(lb.box);
    }
  }
  EXPECT_FALSE(tiling({3, 4, 5}, boxes));
  EXPECT_FALSE(tiling({}, {Box{{}, {}}}));
  EXPECT_FALSE(tiling({0, 4}, {}));
}

// Two copies of the same half cover as many elements as the tensor holds: counting elements
// cannot tell this from a tiling; box arithmetic names both problems.
TEST(Tiling, DuplicateHalfIsAnOverlapNotACover) {
  const std::optional<TilingProblem> p =
      tiling({4, 3}, {Box{{0, 0}, {2, 3}}, Box{{0, 0}, {2, 3}}});
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->overlap);
  EXPECT_EQ(p->first, 0u);
  EXPECT_EQ(p->second, 1u);
  const std::optional<TilingProblem> gap = tiling({4, 3}, {Box{{0, 0}, {2, 3}}});
  ASSERT_TRUE(gap);
  EXPECT_FALSE(gap->overlap);
  EXPECT_EQ(box_string(gap->gap), "[2:4, 0:3]");
  EXPECT_EQ(gap->first, 0u) << "the gap follows box 0";
}

TEST(Tiling, FindsOverlapsAndGapsInInnerDimensions) {
  // The boxes hold 6 + 2 = 8 elements, as many as the tensor, yet overlap in column 2 of
  // row 0 and leave column 3 of row 1 uncovered.
  const std::optional<TilingProblem> p =
      tiling({2, 4}, {Box{{0, 0}, {2, 3}}, Box{{0, 2}, {1, 2}}});
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->overlap);
  EXPECT_EQ(p->first, 0u);
  EXPECT_EQ(p->second, 1u);
  const std::optional<TilingProblem> gap =
      tiling({2, 2, 4}, {Box{{0, 0, 0}, {2, 2, 2}}, Box{{0, 0, 2}, {2, 1, 2}},
                         Box{{1, 1, 2}, {1, 1, 2}}});
  ASSERT_TRUE(gap);
  EXPECT_FALSE(gap->overlap);
  EXPECT_EQ(box_string(gap->gap), "[0:1, 1:2, 2:4]");
  EXPECT_TRUE(tiling({}, {}));
  EXPECT_TRUE(tiling({}, {Box{{}, {}}, Box{{}, {}}})->overlap);
}

// Many row slabs in shuffled order: the check is a sort and a sweep, not pairwise.
TEST(Tiling, TenThousandSlabsAreChecked) {
  std::vector<Box> boxes;
  for (int64_t r = 0; r < 10000; ++r) boxes.push_back(Box{{(r * 7919) % 10000, 0}, {1, 8}});
  EXPECT_FALSE(tiling({10000, 8}, boxes));
  boxes.back().lengths[1] = 7;
  const std::optional<TilingProblem> p = tiling({10000, 8}, boxes);
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->overlap);
  EXPECT_EQ(p->gap.lengths, (std::vector<int64_t>{1, 1}));
}

}  // namespace
}  // namespace ms::ckpt
