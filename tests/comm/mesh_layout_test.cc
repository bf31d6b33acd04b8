// MeshLayout: the rank order world = pp x dp x cp x tp (+ loaders), tp fastest then cp, ep carved
// out of dp x cp.
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
  EXPECT_EQ(mesh_axis_name(MeshAxis::kCp), "cp");
  EXPECT_EQ(mesh_axis_name(MeshAxis::kDpCp), "dp_cp");
  EXPECT_EQ(mesh_axis_name(MeshAxis::kEdp), "edp");
  EXPECT_EQ(mesh_axis_name(MeshAxis::kModel), "model");
}

// Context parallelism. Every shape with cp in {1, 2} and pp * dp * cp * tp <= 8, with each ep
// that divides dp * cp.
std::vector<MeshShape> small_shapes() {
  std::vector<MeshShape> shapes;
  for (int cp = 1; cp <= 2; ++cp) {
    for (int pp = 1; pp * cp <= 8; ++pp) {
      for (int dp = 1; pp * dp * cp <= 8; ++dp) {
        for (int tp = 1; pp * dp * cp * tp <= 8; ++tp) {
          for (int ep = 1; ep <= dp * cp; ++ep) {
            if (dp * cp % ep == 0) shapes.push_back({pp, dp, tp, ep, 0, cp});
          }
        }
      }
    }
  }
  return shapes;
}

std::string describe(const MeshShape& s) {
  return "pp=" + std::to_string(s.pp) + " dp=" + std::to_string(s.dp) + " cp=" +
         std::to_string(s.cp) + " tp=" + std::to_string(s.tp) + " ep=" + std::to_string(s.ep);
}

TEST(MeshContextParallel, TensorParallelVariesFastestThenContextParallel) {
  const MeshLayout layout = must(MeshLayout::create({.dp = 2, .tp = 2, .cp = 2}, 8));
  // rank = ((pp * dp + dp_rank) * cp + cp_rank) * tp + tp_rank: rank 5 = ((0 * 2 + 1) * 2 + 0) *
  // 2 + 1, and its place in the dp x cp group is dp_rank * cp + cp_rank = 2.
  const MeshCoord c = layout.coord(5);
  EXPECT_EQ(c.pp, 0);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.cp, 0);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp_cp, 2);
  EXPECT_EQ(layout.rank_of(0, 1, 0, 1), 5);
  EXPECT_EQ(layout.group(MeshAxis::kTp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(layout.group(MeshAxis::kCp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(layout.group(MeshAxis::kDp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(layout.group(MeshAxis::kDpCp, 5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(layout.group(MeshAxis::kPp, 5), (std::vector<int>{5}));
}

// The rank order is the formula, for every small shape; cp = 1 is the pp x dp x tp order.
TEST(MeshContextParallel, CoordinatesFollowTheRankFormulaAndRoundTrip) {
  for (const MeshShape& shape : small_shapes()) {
    SCOPED_TRACE(describe(shape));
    const MeshLayout layout = must(MeshLayout::create(shape, shape.model_size()));
    for (int rank = 0; rank < layout.world_size(); ++rank) {
      const MeshCoord c = layout.coord(rank);
      EXPECT_EQ(((c.pp * shape.dp + c.dp) * shape.cp + c.cp) * shape.tp + c.tp, rank);
      EXPECT_EQ(c.dp_cp, c.dp * shape.cp + c.cp);
      EXPECT_EQ(layout.rank_of(c.pp, c.dp, c.cp, c.tp), rank);
      if (c.cp == 0) {
        EXPECT_EQ(layout.rank_of(c.pp, c.dp, c.tp), rank);
      }
      EXPECT_LT(c.pp, shape.pp);
      EXPECT_LT(c.dp, shape.dp);
      EXPECT_LT(c.cp, shape.cp);
      EXPECT_LT(c.tp, shape.tp);
      EXPECT_FALSE(c.loader);
    }
  }
}

// Whether `other` belongs to the `axis` group of a rank at `c`, from the coordinates alone: the
// group holds the ranks that agree on every coordinate the axis does not vary.
bool same_group(MeshAxis axis, const MeshShape& s, const MeshCoord& c, const MeshCoord& other) {
  const int folded = c.dp * s.cp + c.cp;
  const int other_folded = other.dp * s.cp + other.cp;
  const bool pp = c.pp == other.pp, dp = c.dp == other.dp, cp = c.cp == other.cp,
             tp = c.tp == other.tp;
  switch (axis) {
    case MeshAxis::kPp: return dp && cp && tp;
    case MeshAxis::kDp: return pp && cp && tp;
    case MeshAxis::kCp: return pp && dp && tp;
    case MeshAxis::kTp: return pp && dp && cp;
    case MeshAxis::kDpCp: return pp && tp;
    case MeshAxis::kEp: return pp && tp && folded / s.ep == other_folded / s.ep;
    case MeshAxis::kEdp: return pp && tp && folded % s.ep == other_folded % s.ep;
    case MeshAxis::kModel: return true;
  }
  return false;
}

// A rank's place in its `axis` group, which the group's communicator rank must equal.
int position_in(MeshAxis axis, const MeshCoord& c) {
  switch (axis) {
    case MeshAxis::kPp: return c.pp;
    case MeshAxis::kDp: return c.dp;
    case MeshAxis::kCp: return c.cp;
    case MeshAxis::kTp: return c.tp;
    case MeshAxis::kDpCp: return c.dp_cp;
    case MeshAxis::kEp: return c.ep;
    case MeshAxis::kEdp: return c.edp;
    case MeshAxis::kModel: return -1;
  }
  return -1;
}

TEST(MeshContextParallel, GroupsHoldTheRanksThatShareTheOtherCoordinates) {
  for (const MeshShape& shape : small_shapes()) {
    SCOPED_TRACE(describe(shape));
    const MeshLayout layout = must(MeshLayout::create(shape, shape.model_size()));
    for (int rank = 0; rank < layout.model_size(); ++rank) {
      const MeshCoord c = layout.coord(rank);
      for (MeshAxis axis : kAllMeshAxes) {
        std::vector<int> expected;
        for (int other = 0; other < layout.model_size(); ++other) {
          if (same_group(axis, shape, c, layout.coord(other))) expected.push_back(other);
        }
        const std::vector<int> group = layout.group(axis, rank);
        EXPECT_EQ(group, expected) << "rank " << rank << " " << mesh_axis_name(axis);
        const auto at = std::find(group.begin(), group.end(), rank) - group.begin();
        if (axis != MeshAxis::kModel) {
          EXPECT_EQ(at, position_in(axis, c)) << "rank " << rank << " " << mesh_axis_name(axis);
        }
      }
      EXPECT_EQ(layout.group(MeshAxis::kEp, rank).size(), static_cast<size_t>(shape.ep));
      EXPECT_EQ(layout.group(MeshAxis::kEdp, rank).size(),
                static_cast<size_t>(shape.dp * shape.cp / shape.ep));
    }
  }
}

TEST(MeshContextParallel, ExpertGroupsSpanDataAndContextParallelRanks) {
  // dp = 3, cp = 2, ep = 3: the dp_cp group {0..5} folds into ep groups {0,1,2} and {3,4,5};
  // rank 2 (dp 1, cp 0) shares experts with dp 0 cp 0, dp 0 cp 1.
  const MeshLayout layout = must(MeshLayout::create({.dp = 3, .ep = 3, .cp = 2}, 6));
  EXPECT_EQ(layout.group(MeshAxis::kEp, 2), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(layout.group(MeshAxis::kEdp, 2), (std::vector<int>{2, 5}));
  EXPECT_EQ(layout.group(MeshAxis::kEp, 3), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(layout.coord(4).ep, 1);
  EXPECT_EQ(layout.coord(4).edp, 1);
  // ep may exceed dp: dp = 2, cp = 2, tp = 2, ep = 4 puts a tp rank's whole dp x cp group in one
  // ep group, and each edp group is a single rank.
  const MeshLayout wide = must(MeshLayout::create({.dp = 2, .tp = 2, .ep = 4, .cp = 2}, 8));
  EXPECT_EQ(wide.group(MeshAxis::kEp, 5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(wide.group(MeshAxis::kEdp, 5), (std::vector<int>{5}));
  EXPECT_EQ(wide.coord(5).ep, 2);
}

TEST(MeshContextParallel, ErrorsNameTheContextParallelSize) {
  const Status ep = MeshLayout::create({.dp = 2, .ep = 3, .cp = 2}, 4).status();
  EXPECT_EQ(ep.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ep.message().find("parallel.ep=3 must divide parallel.dp*cp=2*2=4"),
            std::string::npos)
      << ep.message();
  const Status world = MeshLayout::create({.dp = 2, .tp = 2, .loaders = 1, .cp = 2}, 8).status();
  EXPECT_NE(world.message().find("pp*dp*cp*tp + loaders = 1*2*2*2 + 1 = 9"), std::string::npos)
      << world.message();
  EXPECT_NE(MeshLayout::create({.cp = 0}, 0).status().message().find("parallel.cp"),
            std::string::npos);
}

TEST(MeshContextParallel, LoaderRanksComeAfterTheContextParallelRanks) {
  const MeshLayout layout = must(MeshLayout::create({.loaders = 1, .cp = 2}, 3));
  EXPECT_EQ(layout.model_size(), 2);
  EXPECT_EQ(layout.coord(1).cp, 1);
  EXPECT_TRUE(layout.coord(2).loader);
  EXPECT_TRUE(layout.group(MeshAxis::kCp, 2).empty());
  EXPECT_EQ(layout.group(MeshAxis::kCp, 0), (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace ms::comm
