// The nccl-tests busbw model: bus factors per collective and times that follow from them.
#include "plan/comm_cost.h"

#include <gtest/gtest.h>

namespace ms::plan {
namespace {

TEST(CommCost, BusFactorsAreThoseOfNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kReduceScatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kP2P, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 1), 0.0);
}

TEST(CommCost, TimeIsLatencyStepsPlusBusBytesOverBandwidth) {
  const Link link{.bandwidth_gbs = 100, .latency_us = 5};
  // 1 GB all-reduce over 4 ranks: 6 steps of 5 us + 1e9 * 1.5 / 1e11 s.
  EXPECT_NEAR(collective_seconds(link, Collective::kAllReduce, 1e9, 4), 30e-6 + 0.015, 1e-12);
  EXPECT_NEAR(collective_seconds(link, Collective::kAllGather, 1e9, 4), 15e-6 + 0.0075, 1e-12);
  EXPECT_NEAR(collective_seconds(link, Collective::kP2P, 1e6, 2), 5e-6 + 1e-5, 1e-15);
  EXPECT_EQ(collective_seconds(link, Collective::kAllReduce, 1e9, 1), 0.0);
}

TEST(CommCost, AllReduceCostsAsMuchAsReduceScatterPlusAllGather) {
  const Link link{.bandwidth_gbs = 10, .latency_us = 1};
  for (int n : {2, 3, 8, 64}) {
    EXPECT_NEAR(collective_seconds(link, Collective::kAllReduce, 4e8, n),
                collective_seconds(link, Collective::kReduceScatter, 4e8, n) +
                    collective_seconds(link, Collective::kAllGather, 4e8, n),
                1e-12);
  }
}

}  // namespace
}  // namespace ms::plan
