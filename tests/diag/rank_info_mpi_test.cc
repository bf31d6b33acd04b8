// `ms-diagnose info`'s rank descriptions (diag/rank_info.h) under mpirun: each rank describes
// itself with every key the table and --json read, in order, and every rank gets all of them in
// rank order.
#include "diag/rank_info.h"

#include <gtest/gtest.h>

#include "comm/mpi_communicator.h"

namespace ms::diag {
namespace {

TEST(RankInfo, EveryRankGetsEachRanksDescriptionInRankOrder) {
  auto world = comm::MpiCommunicator::world();
  ASSERT_TRUE(world.ok()) << world.status().to_string();
  comm::Communicator& w = **world;
  Result<nlohmann::ordered_json> mine = describe_rank(w);
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  std::vector<std::string> keys;
  for (const auto& [key, value] : mine->items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"rank", "host", "pid", "cpus", "cpu_util",
                                            "mem_total", "mem_used", "io_backend", "gpus",
                                            "nvml", "clock_offset_s", "clock_rtt_s"}));
  EXPECT_GE((*mine)["cpus"].get<int>(), 1);
  EXPECT_TRUE((*mine)["gpus"].contains("count"));
  // NVML's GPUs, or the named reason there are none (no driver on a CPU machine).
  EXPECT_TRUE((*mine)["nvml"].contains("gpus") || (*mine)["nvml"].contains("skip"));
  if (w.rank() == 0) {
    EXPECT_EQ((*mine)["clock_offset_s"].get<double>(), 0.0);
  }

  Result<std::vector<nlohmann::ordered_json>> all = gather_rank_descriptions(w, *mine);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  ASSERT_EQ(all->size(), static_cast<size_t>(w.size()));
  for (int r = 0; r < w.size(); ++r) EXPECT_EQ((*all)[r]["rank"].get<int>(), r);
  EXPECT_EQ((*all)[w.rank()], *mine);
}

}  // namespace
}  // namespace ms::diag
