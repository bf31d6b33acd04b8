// Process groups under mpirun: split by color/key, and Mesh groups for every valid layout of
// the world size the test runs with (1, 2, 3 or 4 ranks), with and without context parallelism.
#include <gtest/gtest.h>

#include <numeric>

#include "comm/mesh.h"
#include "comm/mpi_communicator.h"

namespace ms::comm {
namespace {

class Groups : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = MpiCommunicator::world();
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    world_ = std::move(world).value();
  }

  std::unique_ptr<MpiCommunicator> world_;
};

int32_t sum_of_world_ranks(Communicator& group) {
  int32_t value = group.world_ranks()[group.rank()];
  EXPECT_TRUE(group.allreduce(&value, &value, 1, DType::kI32, ReduceOp::kSum).ok());
  return value;
}

TEST_F(Groups, SplitByParityOrderedByDescendingKey) {
  const int rank = world_->rank();
  auto split = world_->split(rank % 2, -rank, "parity");
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  Communicator& group = **split;
  std::vector<int> members;
  for (int r = world_->size() - 1; r >= 0; --r) {
    if (r % 2 == rank % 2) members.push_back(r);
  }
  EXPECT_EQ(group.name(), "parity");
  EXPECT_EQ(group.world_ranks(), members);
  EXPECT_EQ(group.size(), static_cast<int>(members.size()));
  EXPECT_EQ(group.world_ranks()[group.rank()], rank);
  EXPECT_EQ(sum_of_world_ranks(group), std::accumulate(members.begin(), members.end(), 0));
}

TEST_F(Groups, NoColorTakesPartButGetsNoGroup) {
  const bool member = world_->rank() == 0;
  auto split = world_->split(member ? 0 : Communicator::kNoColor, 0, "solo");
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(*split == nullptr, !member);
  if (member) {
    EXPECT_EQ((*split)->size(), 1);
  }
}

TEST_F(Groups, NegativeColorIsRejected) {
  EXPECT_EQ(world_->split(-5, 0, "bad").status().code(), StatusCode::kInvalidArgument);
}

// Every (pp, dp, cp, tp, ep, loaders) with pp * dp * cp * tp + loaders == size, cp <= 2,
// loaders <= 1, ep dividing dp * cp.
std::vector<MeshShape> shapes_for(int size) {
  std::vector<MeshShape> shapes;
  for (int loaders = 0; loaders <= 1 && loaders < size; ++loaders) {
    const int model = size - loaders;
    for (int cp = 1; cp <= 2; ++cp) {
      for (int pp = 1; pp * cp <= model; ++pp) {
        for (int tp = 1; pp * cp * tp <= model; ++tp) {
          if (model % (pp * cp * tp) != 0) continue;
          const int dp = model / (pp * cp * tp);
          for (int ep = 1; ep <= dp * cp; ++ep) {
            if (dp * cp % ep == 0) shapes.push_back({pp, dp, tp, ep, loaders, cp});
          }
        }
      }
    }
  }
  return shapes;
}

TEST_F(Groups, MeshGroupsMatchTheLayoutForEveryShape) {
  const int rank = world_->rank();
  for (const MeshShape& shape : shapes_for(world_->size())) {
    SCOPED_TRACE(::testing::Message()
                 << "pp=" << shape.pp << " dp=" << shape.dp << " cp=" << shape.cp
                 << " tp=" << shape.tp
                 << " ep=" << shape.ep << " loaders=" << shape.loaders);
    auto mesh = Mesh::create(*world_, shape);
    ASSERT_TRUE(mesh.ok()) << mesh.status().to_string();
    EXPECT_EQ(mesh->is_loader(), mesh->layout().is_loader(rank));
    if (mesh->is_loader()) continue;
    for (MeshAxis axis : kAllMeshAxes) {
      Communicator& group = mesh->group(axis);
      const std::vector<int> members = mesh->layout().group(axis, rank);
      EXPECT_EQ(group.name(), mesh_axis_name(axis));
      EXPECT_EQ(group.world_ranks(), members) << mesh_axis_name(axis);
      EXPECT_EQ(sum_of_world_ranks(group), std::accumulate(members.begin(), members.end(), 0));
    }
    EXPECT_EQ(mesh->tp().rank(), mesh->coord().tp);
    EXPECT_EQ(mesh->dp().rank(), mesh->coord().dp);
    EXPECT_EQ(mesh->cp().rank(), mesh->coord().cp);
    EXPECT_EQ(mesh->dp_cp().rank(), mesh->coord().dp_cp);
    EXPECT_EQ(mesh->pp().rank(), mesh->coord().pp);
    EXPECT_EQ(mesh->ep().rank(), mesh->coord().ep);
    EXPECT_EQ(mesh->edp().rank(), mesh->coord().edp);
  }
}

TEST_F(Groups, MeshRejectsAShapeThatDoesNotFitTheWorld) {
  const Status status = Mesh::create(*world_, {.dp = world_->size() + 1}).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("world size " + std::to_string(world_->size())),
            std::string::npos);
}

}  // namespace
}  // namespace ms::comm
