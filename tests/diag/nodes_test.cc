// Machine names under Slurm and the suspect-node list `ms-diagnose check` prints for
// `sbatch --exclude`: node names win over host names, ranks group by node, a list names each
// suspect node once.
#include "diag/nodes.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace ms::diag {
namespace {

using telemetry::GroupBy;

// `per_node` ranks on each of the named nodes, rank order node by node, with one metric.
std::vector<RankMeasurement> ranks_on(const std::vector<std::string>& nodes, int per_node,
                                      const std::vector<double>& gflops) {
  std::vector<RankMeasurement> ranks;
  for (size_t n = 0; n < nodes.size(); ++n) {
    for (int i = 0; i < per_node; ++i) {
      const int r = static_cast<int>(ranks.size());
      ranks.push_back({r, nodes[n], {{"gflops", gflops[static_cast<size_t>(r)]}}, {}});
    }
  }
  return ranks;
}

TEST(MachineName, SlurmNodeNameWinsOverTheHostName) {
  EXPECT_EQ(machine_name("gpu-a17", "a17.cluster.example.org"), "gpu-a17");
  EXPECT_EQ(machine_name(nullptr, "laptop"), "laptop");
  EXPECT_EQ(machine_name("", "laptop"), "laptop");
}

TEST(MachineName, ReadsSlurmdNodenameFromTheEnvironment) {
  const char* saved = std::getenv("SLURMD_NODENAME");
  const std::string restore = saved ? saved : "";
  setenv("SLURMD_NODENAME", "node09", 1);
  EXPECT_EQ(machine_name_from_env("host09"), "node09");
  unsetenv("SLURMD_NODENAME");
  EXPECT_EQ(machine_name_from_env("host09"), "host09");
  if (saved) setenv("SLURMD_NODENAME", restore.c_str(), 1);
}

TEST(SuspectNodes, RanksGroupByNodeAndTheSlowNodeIsListedOnce) {
  // Four nodes of two ranks; both ranks of node03 are 40% slower.
  const auto ranks = ranks_on({"node01", "node02", "node03", "node04"}, 2,
                              {100, 101, 99, 100, 60, 61, 100, 102});
  const HealthReport report = assess_health(ranks, HealthOptions{});
  ASSERT_EQ(report.machines.size(), 4u);
  EXPECT_EQ(report.machines[2].machine, "node03");
  EXPECT_EQ(report.machines[2].ranks, (std::vector<int>{4, 5}));
  EXPECT_EQ(suspect_nodes(report, ranks), std::vector<std::string>{"node03"});
  EXPECT_EQ(node_list(suspect_nodes(report, ranks)), "node03");
}

TEST(SuspectNodes, GroupedByRankASuspectRankNamesItsNode) {
  const auto ranks = ranks_on({"node01", "node02", "node03"}, 2, {100, 101, 99, 55, 100, 60});
  HealthOptions by_rank;
  by_rank.group_by = GroupBy::kRank;
  const HealthReport report = assess_health(ranks, by_rank);
  EXPECT_EQ(suspect_nodes(report, ranks), (std::vector<std::string>{"node02", "node03"}));
  EXPECT_EQ(node_list(suspect_nodes(report, ranks)), "node02,node03");
}

TEST(SuspectNodes, HealthyRunListsNothing) {
  const auto ranks = ranks_on({"a", "b", "c"}, 1, {100, 98, 101});
  const HealthReport report = assess_health(ranks, HealthOptions{});
  EXPECT_TRUE(suspect_nodes(report, ranks).empty());
  EXPECT_EQ(node_list({}), "");
}

}  // namespace
}  // namespace ms::diag
