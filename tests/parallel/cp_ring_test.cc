// The context-parallel ring's transfers (parallel/cp_ring.h) at every group size the world
// allows (1, 2, 4): passing each rank's block around the ring for size - 1 hops, rank r holds
// rank r - s - 1's block after hop s, bitwise, whether the hop was polled to completion or
// waited for; a gradient-like accumulator travelling beside it on its own tag comes home after
// size hops with every rank's addend; the all-gather delivers every rank's block; the
// statistics count one transfer per hop and the floats sent; a failed communicator's error is
// reported, nothing is counted or left in flight, and later calls are skipped.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "parallel/cp_ring.h"
#include "tests/parallel/failing_communicator.h"
#include "tests/parallel/tp_harness.h"

namespace ms::parallel {
namespace {

constexpr int kBlockTag = 7101, kAccTag = 7102;

class CpRingTest : public testing::TpTest {};

// Element i of rank r's block: distinct for every rank and element.
std::vector<float> block_of(int r, int64_t n) {
  std::vector<float> b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) b[static_cast<size_t>(i)] = 100.0f * r + 0.25f * i + 0.5f;
  return b;
}

CpRing ring_over(comm::Communicator& group) {
  CpRing ring;
  ring.comm = &group;
  ring.size = group.size();
  ring.rank = group.rank();
  return ring;
}

TEST_F(CpRingTest, BlocksTravelTheRingAndAccumulatorsComeHome) {
  for (int cp : tp_sizes()) {
    auto group = tp_group(cp);
    ASSERT_NE(group, nullptr);
    const int me = group->rank();
    for (bool poll : {false, true}) {
      SCOPED_TRACE("cp " + std::to_string(cp) + (poll ? " polled" : " waited"));
      const int64_t n = 37;
      CpRing ring = ring_over(*group);
      std::vector<float> cur = block_of(me, n), next(static_cast<size_t>(n));
      std::vector<float> acc(static_cast<size_t>(n), 0.0f), acc_next(acc.size());
      for (int s = 0; s < cp; ++s) {
        RingHop hop, acc_hop;
        if (s + 1 < cp) ring.start_hop(hop, cur.data(), next.data(), n, kBlockTag);
        // This step's addend to the accumulator of rank (me - s)'s block: its owner's block
        // times (my rank + 1), so the accumulator home holds the block times sum(r + 1).
        const int owner = (me + cp - s) % cp;
        EXPECT_TRUE(testing::bitwise_equal(cur, block_of(owner, n)));
        for (int64_t i = 0; i < n; ++i) {
          acc[static_cast<size_t>(i)] += cur[static_cast<size_t>(i)] * static_cast<float>(me + 1);
        }
        ring.start_hop(acc_hop, acc.data(), acc_next.data(), n, kAccTag);
        if (poll) {
          while (hop.active || acc_hop.active) {
            ring.poll(hop);
            ring.poll(acc_hop);
            ASSERT_TRUE(ring.error.ok()) << ring.error.to_string();
          }
        }
        ring.finish_hop(hop);
        ring.finish_hop(acc_hop);
        ASSERT_TRUE(ring.error.ok()) << ring.error.to_string();
        EXPECT_FALSE(hop.active);
        std::swap(cur, next);
        std::swap(acc, acc_next);
      }
      // Home: my block's accumulator holds my block times sum over ranks of (rank + 1), added
      // in ring order (me, me + 1, ...): the direct sum in the same order.
      const std::vector<float> mine = block_of(me, n);
      std::vector<float> expected(static_cast<size_t>(n), 0.0f);
      for (int s = 0; s < cp; ++s) {
        const int adder = (me + s) % cp;
        for (int64_t i = 0; i < n; ++i) {
          expected[static_cast<size_t>(i)] +=
              mine[static_cast<size_t>(i)] * static_cast<float>(adder + 1);
        }
      }
      EXPECT_TRUE(testing::bitwise_equal(acc, expected));
      EXPECT_EQ(ring.stats.collectives, 2 * cp - 1);
      EXPECT_EQ(ring.stats.bytes, static_cast<uint64_t>((2 * cp - 1) * n) * sizeof(float));
      EXPECT_GE(ring.stats.active_s, 0.0);
      EXPECT_GE(ring.stats.exposed_s, 0.0);
    }
  }
}

TEST_F(CpRingTest, AllgatherDeliversEveryRanksBlockUncounted) {
  for (int cp : tp_sizes()) {
    auto group = tp_group(cp);
    ASSERT_NE(group, nullptr);
    CpRing ring = ring_over(*group);
    const int64_t n = 5;
    const std::vector<float> mine = block_of(group->rank(), n);
    std::vector<float> all(static_cast<size_t>(n * cp));
    ring.allgather(mine.data(), all.data(), static_cast<size_t>(n), DType::kF32);
    ASSERT_TRUE(ring.error.ok()) << ring.error.to_string();
    for (int r = 0; r < cp; ++r) {
      const std::vector<float> theirs(all.begin() + r * n, all.begin() + (r + 1) * n);
      EXPECT_TRUE(testing::bitwise_equal(theirs, block_of(r, n)));
    }
    EXPECT_EQ(ring.stats.collectives, 0);
    EXPECT_EQ(ring.stats.bytes, 0u);
  }
}

TEST_F(CpRingTest, AFailedCommunicatorsErrorIsReportedAndLaterCallsAreSkipped) {
  testing::FailingCommunicator failing(0, 2);
  CpRing ring = ring_over(failing);
  std::vector<float> send(8, 1.0f), recv(8, -1.0f);
  RingHop hop;
  ring.start_hop(hop, send.data(), recv.data(), 8, kBlockTag);
  EXPECT_EQ(ring.error.to_string(), testing::FailingCommunicator::failure().to_string());
  EXPECT_FALSE(hop.active);
  EXPECT_EQ(ring.stats.collectives, 0);
  EXPECT_EQ(ring.stats.bytes, 0u);
  ring.poll(hop);
  ring.finish_hop(hop);
  // A later all-gather is skipped: the first error stays and recv is untouched.
  ring.error = Unavailable("first");
  ring.allgather(send.data(), recv.data(), 4, DType::kF32);
  EXPECT_EQ(ring.error.message(), "first");
  for (float v : recv) EXPECT_EQ(v, -1.0f);
}

}  // namespace
}  // namespace ms::parallel
