// The simulated inter-node link under mpirun (1 to 4 ranks as nodes of 2): node ids from
// comm.ranks_per_node and from the hostnames, data passing through unchanged, and the bytes and
// link time each operation is charged (computed from the model, not measured).
#include "comm/simulated_link.h"

#include <gtest/gtest.h>

#include <numeric>

#include "comm/mpi_communicator.h"

namespace ms::comm {
namespace {

TEST(NodeIds, FromRanksPerNodeAndFromHostnames) {
  auto world = MpiCommunicator::world();
  ASSERT_TRUE(world.ok());
  auto pairs = node_ids(**world, 2);
  ASSERT_TRUE(pairs.ok());
  for (int r = 0; r < (*world)->size(); ++r) EXPECT_EQ((*pairs)[r], r / 2);
  // Every rank of this test runs on this machine.
  auto hosts = node_ids(**world, 0);
  ASSERT_TRUE(hosts.ok()) << hosts.status().to_string();
  for (int node : *hosts) EXPECT_EQ(node, 0);
}

TEST(SimulatedLink, PassesDataAndChargesTheBytesToOtherNodes) {
  auto world = MpiCommunicator::world();
  ASSERT_TRUE(world.ok());
  const int n = (*world)->size(), me = (*world)->rank();
  std::vector<int> nodes(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) nodes[r] = r / 2;
  const LinkModel model{8.0, 10.0};  // 1 GB/s, 10 us
  SimulatedLink link(**world, nodes, model);
  int far = 0;
  for (int r = 0; r < n; ++r) far += r / 2 != me / 2 ? 1 : 0;
  const int near = n - 1 - far;

  // An all-to-all of 1000 floats a peer, blocking.
  std::vector<float> send(static_cast<size_t>(1000 * n)), recv(send.size());
  std::iota(send.begin(), send.end(), static_cast<float>(me * 100000));
  ASSERT_TRUE(link.alltoall(send.data(), recv.data(), 1000, DType::kF32).ok());
  for (int r = 0; r < n; ++r) EXPECT_EQ(recv[r * 1000], static_cast<float>(r * 100000 + me * 1000));
  LinkTraffic t = link.traffic()["world"];
  EXPECT_EQ(t.inter_node_bytes, uint64_t(4000 * far));
  EXPECT_EQ(t.intra_node_bytes, uint64_t(4000 * near));
  const double want = far > 0 ? 10e-6 + 4000.0 * far * 8 / 8e9 : 0.0;
  EXPECT_NEAR(t.delay_s, want, 1e-12);

  // A nonblocking all-reduce: its request completes and the sum is right.
  int32_t value = me + 1;
  auto request = link.iallreduce(&value, &value, 1, DType::kI32, ReduceOp::kSum);
  ASSERT_TRUE(request.ok());
  ASSERT_TRUE(request->wait().ok());
  EXPECT_EQ(value, n * (n + 1) / 2);

  // A group split from the link is charged under its own name.
  auto half = link.split(me % 2, me, "half");
  ASSERT_TRUE(half.ok());
  int64_t x = 1;
  ASSERT_TRUE((*half)->allreduce(&x, &x, 1, DType::kI64, ReduceOp::kSum).ok());
  EXPECT_EQ(x, (*half)->size());
  EXPECT_EQ(link.traffic().count("half"), 1u);
}

}  // namespace
}  // namespace ms::comm
