// The recommendation among ties (issue 50, item 3): error bands from the profile's spread,
// ties with the fastest, the least modelled communication and pipeline wait among them, and the reason given.
#include "plan/recommend.h"

#include <gtest/gtest.h>

#include "plan/search.h"
#include "plan_fixtures.h"

namespace ms::plan {
namespace {

Prediction predicted(double step_s, double band_s, double comm_s) {
  Prediction p;
  p.step_s = step_s;
  p.band_s = band_s;
  p.tp.seconds = comm_s;
  return p;
}

TEST(Recommend, WithoutTiesTheFastestIsRecommended) {
  const Recommendation r = recommend({predicted(1.0, 0.01, 0.5), predicted(1.1, 0.01, 0.0)});
  EXPECT_EQ(r.index, 0u);
  EXPECT_EQ(r.ties, 1u);
  EXPECT_NE(r.reason.find("the fastest predicted; no other layout"), std::string::npos)
      << r.reason;
}

TEST(Recommend, AmongTiesTheLeastCommunicationWinsAndSaysWhy) {
  // Bands 5%: 1.0 +- 0.05 and 1.08 +- 0.054 overlap; 1.2 does not.
  const std::vector<Prediction> ranked = {predicted(1.0, 0.05, 0.3), predicted(1.08, 0.054, 0.1),
                                          predicted(1.2, 0.06, 0.0)};
  const Recommendation r = recommend(ranked);
  EXPECT_EQ(r.ties, 2u);
  EXPECT_EQ(r.index, 1u);
  EXPECT_NE(r.reason.find("2 layouts predicted within the error band"), std::string::npos)
      << r.reason;
  EXPECT_NE(r.reason.find("least modelled communication and pipeline wait (0.1 s per step against 0.3 s"),
            std::string::npos)
      << r.reason;
  EXPECT_TRUE(ties_with(ranked[1], ranked[0]));
  EXPECT_FALSE(ties_with(ranked[2], ranked[0]));
}

TEST(Recommend, TheFastestKeepsATieWhenItCommunicatesLeast) {
  const Recommendation r = recommend({predicted(1.0, 0.05, 0.1), predicted(1.01, 0.05, 0.3)});
  EXPECT_EQ(r.ties, 2u);
  EXPECT_EQ(r.index, 0u);
  EXPECT_NE(r.reason.find("the fastest predicted also has the least"), std::string::npos)
      << r.reason;
}

// A pipeline's idle time counts as waiting on peers: a tie with little on the wire but a large
// bubble loses to one with a little more on the wire and none.
TEST(Recommend, APipelinesBubbleCountsAsPeerWait) {
  Prediction pipelined = predicted(1.0, 0.05, 0.01);
  pipelined.compute_s = 1.0;
  pipelined.bubble = 0.2;  // 0.2 s idle
  const Prediction flat = predicted(1.02, 0.05, 0.1);
  EXPECT_DOUBLE_EQ(pipelined.peer_wait_s(), 0.21);
  const Recommendation r = recommend({pipelined, flat});
  EXPECT_EQ(r.ties, 2u);
  EXPECT_EQ(r.index, 1u);
}

// The band comes from the cluster's profile.spread, and the search keeps the recommendation in
// the list however short --top makes it.
TEST(Recommend, TheSearchBandsEveryPredictionAndKeepsTheRecommendation) {
  Cluster cluster = fixtures::test_cluster(4, 1e6);
  cluster.profile.spread = 0.5;  // so wide that every layout ties
  Result<SearchResult> r = search_layouts(cluster, fixtures::small_model(), 4, {}, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_GT(r->recommendation.ties, 1u);
  ASSERT_LT(r->recommendation.index, r->ranked.size());
  for (const Prediction& p : r->ranked) EXPECT_DOUBLE_EQ(p.band_s, p.step_s * 0.5);
  // The least communication of the ties (those kept are the first of them).
  for (const Prediction& p : r->ranked) {
    EXPECT_LE(r->recommended().peer_wait_s(), p.peer_wait_s() / 0.99);
  }
  cluster.profile.spread = 0;
  Result<SearchResult> exact = search_layouts(cluster, fixtures::small_model(), 4);
  ASSERT_TRUE(exact.ok());
  EXPECT_LT(exact->recommendation.index, exact->recommendation.ties);
  EXPECT_EQ(exact->ranked.front().band_s, 0.0);
}

}  // namespace
}  // namespace ms::plan
