// The dp reduction's overlap measured, not assumed (issue 50, item 2): the share the profile's
// probe saw hidden (Cluster::dp_hidden) sets the exposed reduction, below 0 more than the
// reduction itself; the oversubscribed figure serves jobs with more ranks than devices.
#include <gtest/gtest.h>

#include "plan/search.h"
#include "plan_fixtures.h"

namespace ms::plan {
namespace {

using fixtures::small_model;
using fixtures::test_cluster;

Prediction dp4(const Cluster& cluster) {
  Result<Prediction> p = predict_layout(cluster, small_model(), Layout{.dp = 4}, 4);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? *p : Prediction{};
}

TEST(DpOverlap, TheMeasuredShareSetsTheExposedReduction) {
  // A slow link, so that the reduction is long next to the backward.
  Cluster c = test_cluster(4, 1e6, /*bandwidth_gbs=*/0.01);
  const Prediction assumed = dp4(c);  // overlap_dp false: all of it exposed
  EXPECT_FALSE(assumed.dp_overlap_measured);
  EXPECT_DOUBLE_EQ(assumed.dp_exposed_s, assumed.dp.seconds);
  c.dp_hidden = 0.0;
  EXPECT_DOUBLE_EQ(dp4(c).dp_exposed_s, assumed.dp.seconds);
  c.dp_hidden = 1.0;  // fully hidden as far as the backward lasts
  const Prediction hidden = dp4(c);
  EXPECT_TRUE(hidden.dp_overlap_measured);
  EXPECT_LT(hidden.dp_exposed_s, assumed.dp_exposed_s);
  EXPECT_GE(hidden.dp_exposed_s, 0.0);
  c.dp_hidden = -0.5;  // the overlap slowed the step
  const Prediction worse = dp4(c);
  EXPECT_GT(worse.dp_exposed_s, assumed.dp_exposed_s);
  EXPECT_GT(worse.step_s, assumed.step_s);
  // One rank: nothing to reduce, nothing measured applies.
  Result<Prediction> one = predict_layout(c, small_model(), Layout{}, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->dp_overlap_measured);
}

TEST(DpOverlap, AnOversubscribedNodeTakesItsOwnMeasurement) {
  Cluster c = test_cluster(4, 1e6, 0.01);
  c.devices_per_node = 2;  // 4 ranks on 2 devices
  c.dp_hidden = 1.0;
  c.dp_hidden_oversubscribed = -1.0;
  const Prediction p = dp4(c);
  EXPECT_GT(p.dp_exposed_s, p.dp.seconds);  // the oversubscribed figure: worse than none
  Result<Cluster> back = cluster_from_yaml_text(cluster_to_yaml(c), "o.yaml");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->dp_hidden, 1.0);
  EXPECT_EQ(back->dp_hidden_oversubscribed, -1.0);
  std::string yaml = cluster_to_yaml(c);
  yaml.replace(yaml.find("dp_hidden: 1"), 12, "dp_hidden: 2");
  Result<Cluster> bad = cluster_from_yaml_text(yaml, "bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.yaml: overlap.dp_hidden must be at most 1"),
            std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace ms::plan
