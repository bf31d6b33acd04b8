// MeshLayout: the rank order world = pp x dp x tp (+ loaders), tp fastest, ep carved out of dp.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "comm/mesh.h"

namespace ms::comm {
namespace {

MeshLayout must(Result<MeshLayout> layout) {
  EXPECT_TRUE(layout.ok()) << layout.status().to_string();
  return std::move(layout).value();
}

TEST(MeshLayout, TensorParallelVariesFastest) {
  const MeshLayout layout = must(MeshLayout::create({.pp = 2, .dp = 2, .tp = 2}, 8));
  // rank = (pp * dp + dp_rank) * tp + tp_rank: rank 5 = (1 * 2 + 0) * 2 + 1.
  const MeshCoord c = layout.coord(5);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(c.tp, 1);
  EXPECT_FALSE(c.loader);
  EXPECT_EQ(layout.rank_of(1, 0, 1), 5);
  EXPECT_EQ(layout.group(MeshAxis::kTp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(layout.group(MeshAxis::kDp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(layout.group(MeshAxis::kPp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(layout.group(MeshAxis::kModel, 5), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(MeshLayout, RankOfInvertsCoord) {
  const MeshLayout layout = must(MeshLayout::create({.pp = 3, .dp = 2, .tp = 4}, 24));
  for (int rank = 0; rank < layout.world_size(); ++rank) {
    const MeshCoord c = layout.coord(rank);
    EXPECT_EQ(layout.rank_of(c.pp, c.dp, c.tp), rank);
  }
}

TEST(MeshLayout, ExpertGroupsAreConsecutiveDataParallelRanks) {
  // dp = 4, tp = 2, ep = 2: rank r has tp_rank r % 2 and dp_rank r / 2.
  const MeshLayout layout = must(MeshLayout::create({.dp = 4, .tp = 2, .ep = 2}, 8));
  EXPECT_EQ(layout.group(MeshAxis::kEp, 0), (std::vector<int>{0, 2}));   // dp 0, 1
  EXPECT_EQ(layout.group(MeshAxis::kEdp, 0), (std::vector<int>{0, 4}));  // dp 0, 2
  EXPECT_EQ(layout.group(MeshAxis::kEp, 7), (std::vector<int>{5, 7}));   // dp 2, 3
  EXPECT_EQ(layout.group(MeshAxis::kEdp, 7), (std::vector<int>{3, 7}));  // dp 1, 3
  const MeshCoord c = layout.coord(7);
  EXPECT_EQ(c.ep, 1);
  EXPECT_EQ(c.edp, 1);
}

TEST(MeshLayout, LoaderRanksComeLastAndHoldNoModel) {
  const MeshLayout layout = must(MeshLayout::create({.dp = 2, .loaders = 1}, 3));
  EXPECT_EQ(layout.model_size(), 2);
  EXPECT_FALSE(layout.is_loader(1));
  EXPECT_TRUE(layout.is_loader(2));
  EXPECT_TRUE(layout.coord(2).loader);
  EXPECT_TRUE(layout.group(MeshAxis::kDp, 2).empty());
  EXPECT_EQ(layout.group(MeshAxis::kModel, 0), (std::vector<int>{0, 1}));
}

// Along every axis the groups partition the model ranks into equal-size groups, and each rank
// sits in its own group at the position its coordinate says.
TEST(MeshLayout, GroupsPartitionTheModelRanks) {
  const MeshShape shapes[] = {{.pp = 2, .dp = 4, .tp = 2, .ep = 2},
                              {.pp = 1, .dp = 6, .tp = 1, .ep = 3},
                              {.pp = 3, .dp = 2, .tp = 1, .ep = 1, .loaders = 2}};
  for (const MeshShape& shape : shapes) {
    const int world = shape.pp * shape.dp * shape.tp + shape.loaders;
    const MeshLayout layout = must(MeshLayout::create(shape, world));
    for (MeshAxis axis : kAllMeshAxes) {
      std::map<std::vector<int>, int> groups;
      for (int rank = 0; rank < layout.model_size(); ++rank) {
        const std::vector<int> group = layout.group(axis, rank);
        EXPECT_NE(std::find(group.begin(), group.end(), rank), group.end());
        EXPECT_TRUE(std::is_sorted(group.begin(), group.end()));
        ++groups[group];
      }
      const size_t group_size = groups.begin()->first.size();
      for (const auto& [members, seen] : groups) {
        EXPECT_EQ(members.size(), group_size) << mesh_axis_name(axis);
        EXPECT_EQ(seen, static_cast<int>(members.size())) << mesh_axis_name(axis);
      }
      EXPECT_EQ(groups.size() * group_size, static_cast<size_t>(layout.model_size()));
    }
  }
}

TEST(MeshLayout, WorldSizeMismatchNamesTheSizes) {
  const Status status = MeshLayout::create({.pp = 2, .dp = 2, .tp = 2}, 6).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("world size 6"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("2*2*2 + 0 = 8"), std::string::npos) << status.message();
}

TEST(MeshLayout, ExpertParallelMustDivideDataParallel) {
  const Status status = MeshLayout::create({.dp = 4, .ep = 3}, 4).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("parallel.ep=3 must divide parallel.dp=4"), std::string::npos);
}

TEST(MeshLayout, SizesMustBePositive) {
  EXPECT_NE(MeshLayout::create({.tp = 0}, 0).status().message().find("parallel.tp"),
            std::string::npos);
  EXPECT_FALSE(MeshLayout::create({.pp = -1}, 1).ok());
  EXPECT_FALSE(MeshLayout::create({.loaders = -1}, 0).ok());
}

TEST(MeshAxis, NamesAreTheGroupNames) {
  EXPECT_EQ(mesh_axis_name(MeshAxis::kDp), "dp");
  EXPECT_EQ(mesh_axis_name(MeshAxis::kEdp), "edp");
  EXPECT_EQ(mesh_axis_name(MeshAxis::kModel), "model");
}

}  // namespace
}  // namespace ms::comm
