// The verdict of `ms-diagnose check` on injected measurements: a suspect must be both a
// statistical outlier and practically worse, per rank and per host.
#include "diag/health.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ms::diag {
namespace {

using telemetry::GroupBy;

// One rank per host ("node<r>"), each with a single metric value.
std::vector<RankMeasurement> one_rank_per_host(const std::vector<double>& gflops) {
  std::vector<RankMeasurement> ranks;
  for (size_t r = 0; r < gflops.size(); ++r) {
    ranks.push_back({static_cast<int>(r), "node" + std::to_string(r), {{"gflops", gflops[r]}}, {}});
  }
  return ranks;
}

std::vector<std::string> suspects(const HealthReport& report) {
  std::vector<std::string> names;
  for (const MachineVerdict& m : report.machines) {
    if (m.suspect) names.push_back(m.machine);
  }
  return names;
}

TEST(Health, HealthyNoisyMeasurementsRaiseNoAlarm) {
  const HealthReport report =
      assess_health(one_rank_per_host({100, 93, 107, 97, 104, 91, 102, 96}), HealthOptions{});
  EXPECT_FALSE(report.any_suspect());
  EXPECT_EQ(report.machines.size(), 8u);
}

TEST(Health, OneHostFortyPercentSlowerIsTheSuspect) {
  const HealthReport report =
      assess_health(one_rank_per_host({100, 98, 60, 101, 99, 102}), HealthOptions{});
  EXPECT_EQ(suspects(report), std::vector<std::string>{"node2"});
  const Finding& f = report.machines[2].findings.at(0);
  EXPECT_EQ(f.metric, "gflops");
  EXPECT_NEAR(f.degradation, 0.4, 0.01);
  EXPECT_LT(f.robust_z, -3.5);
}

TEST(Health, OutlierOnlyTenPercentWorseIsNoAlarm) {
  // The others agree within 0.1%, so 90 is a huge statistical outlier, yet only 10% worse.
  const HealthReport report =
      assess_health(one_rank_per_host({100, 100.1, 99.9, 90, 100}), HealthOptions{});
  EXPECT_FALSE(report.any_suspect());
  HealthOptions strict;
  strict.min_degradation = 0.05;
  EXPECT_EQ(suspects(assess_health(one_rank_per_host({100, 100.1, 99.9, 90, 100}), strict)),
            std::vector<std::string>{"node3"});
}

TEST(Health, ZeroMadIdenticalValuesAreHealthy) {
  EXPECT_FALSE(assess_health(one_rank_per_host({50, 50, 50, 50}), HealthOptions{}).any_suspect());
}

TEST(Health, ZeroMadStillFlagsAPracticallyWorseValue) {
  // Three identical values make MAD 0: the 30%-slower one has an infinite z and is 30% worse.
  const HealthReport report = assess_health(one_rank_per_host({50, 50, 35, 50}), HealthOptions{});
  EXPECT_EQ(suspects(report), std::vector<std::string>{"node2"});
  EXPECT_TRUE(std::isinf(report.machines[2].findings[0].robust_z));
  EXPECT_FALSE(assess_health(one_rank_per_host({50, 50, 48, 50}), HealthOptions{}).any_suspect());
}

TEST(Health, FewerThanThreePeersGiveNoVerdict) {
  EXPECT_FALSE(assess_health(one_rank_per_host({100, 10}), HealthOptions{}).any_suspect());
  EXPECT_FALSE(assess_health(one_rank_per_host({100}), HealthOptions{}).any_suspect());
  EXPECT_TRUE(assess_health(std::vector<RankMeasurement>{}, HealthOptions{}).machines.empty());
}

// Four hosts with two ranks each; metric values per rank.
std::vector<RankMeasurement> two_ranks_per_host(const std::vector<double>& values) {
  std::vector<RankMeasurement> ranks;
  for (size_t r = 0; r < values.size(); ++r) {
    ranks.push_back({static_cast<int>(r), "node" + std::to_string(r / 2), {{"triad", values[r]}}, {}});
  }
  return ranks;
}

TEST(Health, MultiRankHostWithOneSlowRankIsSuspect) {
  const HealthReport report =
      assess_health(two_ranks_per_host({10, 10.2, 9.9, 10.1, 5, 10, 10.3, 9.8}), HealthOptions{});
  EXPECT_EQ(suspects(report), std::vector<std::string>{"node2"});
  EXPECT_EQ(report.machines[2].ranks, (std::vector<int>{4, 5}));
  EXPECT_EQ(report.machines[2].findings[0].subject, "rank4");
}

TEST(Health, GroupingByRankMakesEachRankAMachine) {
  HealthOptions by_rank;
  by_rank.group_by = GroupBy::kRank;
  const HealthReport report =
      assess_health(two_ranks_per_host({10, 10.2, 9.9, 10.1, 5, 10, 10.3, 9.8}), by_rank);
  EXPECT_EQ(report.machines.size(), 8u);
  EXPECT_EQ(suspects(report), std::vector<std::string>{"rank4"});
}

TEST(Health, WholeHostSlowIsFoundAtMachineLevel) {
  // Six hosts of two ranks; host 1's ranks are both 40% slower.
  std::vector<RankMeasurement> ranks;
  const double base[] = {10, 10.1, 6, 6.05, 9.9, 10.2, 10, 9.95, 10.05, 9.9, 10.1, 10};
  for (int r = 0; r < 12; ++r) {
    ranks.push_back({r, "node" + std::to_string(r / 2), {{"triad", base[r]}}, {}});
  }
  const HealthReport report = assess_health(ranks, HealthOptions{});
  EXPECT_EQ(suspects(report), std::vector<std::string>{"node1"});
  bool machine_level = false;
  for (const Finding& f : report.machines[1].findings) machine_level |= f.subject == "node1";
  EXPECT_TRUE(machine_level);
}


TEST(Health, ARankFaultMakesItsMachineSuspectWithoutAComparison) {
  // Two ranks, too few to compare: only the fault decides.
  std::vector<RankMeasurement> ranks = {
      {0, "node0", {{"gflops", 100}}, {}},
      {1, "node1", {{"gflops", 100}}, {"GPU 1 (00000000:18:00.0): bad: row_remap_pending: x"}}};
  const HealthReport report = assess_health(ranks, HealthOptions{});
  ASSERT_EQ(report.machines.size(), 2u);
  EXPECT_FALSE(report.machines[0].suspect);
  EXPECT_TRUE(report.machines[1].suspect);
  ASSERT_EQ(report.machines[1].faults.size(), 1u);
  EXPECT_EQ(report.machines[1].faults[0],
            "rank1: GPU 1 (00000000:18:00.0): bad: row_remap_pending: x");
  EXPECT_TRUE(report.machines[1].findings.empty());
}

}  // namespace
}  // namespace ms::diag
