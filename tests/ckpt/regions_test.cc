// Box arithmetic behind the checkpoint planner and loader: flat ranges become regular boxes
// that cover exactly the range, in order; boxes split along rows; overlaps copy correctly.
#include <gtest/gtest.h>

#include <numeric>

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
  copy_region(*region, src_box, reinterpret_cast<const std::byte*>(src.data()), dst_box,
              reinterpret_cast<std::byte*>(dst.data()), sizeof(float));
  EXPECT_EQ(dst, (std::vector<float>{6, 7, 10, 11, 14, 15}));
  EXPECT_FALSE(intersect_boxes(Box{{0}, {2}}, Box{{2}, {2}}).has_value());
}

}  // namespace
}  // namespace ms::ckpt
