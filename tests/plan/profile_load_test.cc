// Profiles that notice load (issue 50, item 5): other processes' CPU share from /proc/stat less
// the profile's own, timings under load repeated with the quietest kept, the share and the
// timings' spread recorded in the cluster file, and predictions from a disturbed profile saying
// so.
#include <gtest/gtest.h>

#include "plan/cluster.h"
#include "plan/load_meter.h"
#include "plan/profile_timer.h"
#include "plan/report.h"
#include "plan/search.h"
#include "plan_fixtures.h"

namespace ms::plan {
namespace {

// A reading `busy` of `total` node ticks, `own` of them this process's.
LoadReading reading(uint64_t busy, uint64_t total, double own) {
  return {{busy, total}, own};
}

TEST(LoadMeter, OthersShareIsTheNodesBusyTimeLessOurOwn) {
  // 200 ticks of node time (2 cores x 100), 150 busy, 100 of them ours: others 50 / 200.
  EXPECT_DOUBLE_EQ(others_share(reading(0, 0, 0), reading(150, 200, 100)), 0.25);
  // Our own work alone: nobody else.
  EXPECT_DOUBLE_EQ(others_share(reading(10, 100, 5), reading(110, 300, 105)), 0.0);
  EXPECT_DOUBLE_EQ(others_share(reading(10, 100, 5), reading(10, 100, 5)), 0.0);
  LoadTally tally;
  tally.add(reading(0, 0, 0), reading(150, 200, 100));  // 50 of 200
  tally.add(reading(0, 0, 0), reading(100, 200, 100));  // 0 of 200
  EXPECT_DOUBLE_EQ(tally.share(), 0.125);
}

TEST(LoadMeter, ReadsThisMachinesProc) {
  Result<LoadReading> a = read_load();
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_GT(a->node.total, 0u);
  Result<LoadReading> missing = read_load("/nonexistent-proc");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent-proc/stat"), std::string::npos);
}

// A load source that reports, per attempt, the share of the node others took: each call pair
// (before, after) advances 100 node ticks, `shares[i]` of them others'.
ProfileTimer::LoadSource scripted(std::vector<double> shares, int* calls) {
  return [shares, calls]() -> Result<LoadReading> {
    const int attempt = *calls / 2;
    const bool after = *calls % 2 == 1;
    ++*calls;
    if (!after) return reading(0, 0, 0);
    const double share = shares[static_cast<size_t>(std::min<int>(attempt, shares.size() - 1))];
    return reading(static_cast<uint64_t>(share * 100), 100, 0);
  };
}

TEST(ProfileTimer, ATimingUnderLoadIsRepeatedAndTheQuietestKept) {
  int calls = 0;
  ProfileTimer timer(0, scripted({0.5, 0.3, 0.4}, &calls), 3);
  int runs = 0;
  using Sets = std::vector<std::vector<double>>;
  Result<std::vector<double>> t = timer.time_sets([&]() -> Result<Sets> {
    ++runs;
    // Attempt i times its op at i + 1 seconds: the kept one tells which attempt won.
    return std::vector<std::vector<double>>{{1.0 * runs, 1.0 * runs, 1.0 * runs, 1.0 * runs}};
  });
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(runs, 3);
  EXPECT_DOUBLE_EQ(t->front(), 2.0);  // the second attempt, at 30% load
  const ProfileQuality q = timer.quality();
  EXPECT_EQ(q.repeated, 2);
  EXPECT_DOUBLE_EQ(q.load_share, 0.3);
  EXPECT_DOUBLE_EQ(q.spread, 0.0);
}

TEST(ProfileTimer, AQuietTimingIsNotRepeatedAndAnUnmeteredOneStands) {
  int calls = 0;
  ProfileTimer quiet(0, scripted({0.02}, &calls), 3);
  int runs = 0;
  quiet.time([&] { ++runs; });
  EXPECT_EQ(calls, 2);  // one attempt
  EXPECT_EQ(quiet.quality().repeated, 0);
  EXPECT_NEAR(quiet.quality().load_share, 0.02, 1e-12);
  ProfileTimer unmetered(0, nullptr, 3);
  using Sets = std::vector<std::vector<double>>;
  Result<std::vector<double>> t =
      unmetered.time_sets([]() -> Result<Sets> { return Sets{{1, 2, 3, 4}}; });
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t->front(), 2.0);  // the lower quartile of 4: the second
  EXPECT_DOUBLE_EQ(unmetered.quality().load_share, 0.0);
  // (4 - 2) / 2: the upper quartile over the lower.
  EXPECT_DOUBLE_EQ(unmetered.quality().spread, 1.0);
}

TEST(ProfileTimer, QuartilesAndSpread) {
  EXPECT_DOUBLE_EQ(lower_quartile({4, 3, 2, 1, 5, 6, 7, 8}), 3.0);
  // Index 2 of 8 sorted (3) and index 6 (7): (7 - 3) / 3.
  EXPECT_DOUBLE_EQ(quartile_spread({4, 3, 2, 1, 5, 6, 7, 8}), 4.0 / 3.0);
}

TEST(ClusterProfile, TheProfileSectionRoundTripsAndIsChecked) {
  Cluster c = fixtures::test_cluster(2, 1);
  c.profile = {.spread = 0.04, .load_share = 0.35, .repeated = 7};
  Result<Cluster> back = cluster_from_yaml_text(cluster_to_yaml(c), "round.yaml");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_DOUBLE_EQ(back->profile.spread, 0.04);
  EXPECT_DOUBLE_EQ(back->profile.load_share, 0.35);
  EXPECT_EQ(back->profile.repeated, 7);
  EXPECT_TRUE(back->disturbed());
  std::string yaml = cluster_to_yaml(c);
  yaml.replace(yaml.find("load_share: 0.35"), 16, "load_share: 1.5");
  Result<Cluster> bad = cluster_from_yaml_text(yaml, "bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.yaml: profile.load_share must be at most 1"),
            std::string::npos)
      << bad.status().message();
}

TEST(ClusterProfile, PredictionsFromADisturbedProfileSaySo) {
  Cluster c = fixtures::test_cluster(2, 1e6);
  const config::RunConfig model = fixtures::small_model();
  Result<Prediction> quiet = predict_layout(c, model, Layout{.dp = 2}, 2);
  ASSERT_TRUE(quiet.ok());
  EXPECT_FALSE(quiet->disturbed_profile);
  c.profile.load_share = 0.4;
  Result<Prediction> loaded = predict_layout(c, model, Layout{.dp = 2}, 2);
  ASSERT_TRUE(loaded.ok());
  EXPECT_TRUE(loaded->disturbed_profile);
  EXPECT_NE(disturbed_note(c).find("took 40% of the node's CPU"), std::string::npos)
      << disturbed_note(c);
  Result<SearchResult> r = search_layouts(c, model, 2);
  ASSERT_TRUE(r.ok());
  const PlanContext ctx{"run.yaml", &c, &model, 2};
  EXPECT_NE(plan_text(ctx, *r, nullptr).find("took 40% of the node's CPU"), std::string::npos);
  EXPECT_EQ(plan_json(ctx, *r, nullptr)["profile"]["disturbed"], true);
}

}  // namespace
}  // namespace ms::plan
