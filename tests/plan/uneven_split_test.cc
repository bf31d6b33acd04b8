// Uneven pipeline splits (issue 50, item 4): a model whose layers the pipeline stages do not
// divide is planned with parallel.pp_layers, as the trainer runs it, instead of being left out.
#include <gtest/gtest.h>

#include <algorithm>

#include "plan/layout.h"
#include "plan/search.h"
#include "plan_fixtures.h"

namespace ms::plan {
namespace {

using fixtures::small_model;
using fixtures::test_cluster;

config::RunConfig five_layers() {
  config::RunConfig c = small_model();
  c.model.n_layers = 5;
  return c;
}

TEST(UnevenSplit, PlannedSplitsAreEvenWhereTheyCanBeAndNearEvenBothWaysOtherwise) {
  EXPECT_EQ(planned_pp_splits(8, 2, 1), (std::vector<std::vector<int64_t>>{{}}));
  EXPECT_EQ(planned_pp_splits(5, 2, 1), (std::vector<std::vector<int64_t>>{{3, 2}, {2, 3}}));
  EXPECT_EQ(planned_pp_splits(7, 2, 2),
            (std::vector<std::vector<int64_t>>{{2, 2, 2, 1}, {1, 2, 2, 2}}));
  EXPECT_TRUE(planned_pp_splits(3, 2, 2).empty());  // 4 stages, 3 layers
}

TEST(UnevenSplit, AFiveLayerModelIsPlannedAtPp2) {
  const config::RunConfig c = five_layers();
  bool saw_first = false, saw_last = false;
  for (const Layout& l : candidate_layouts(c, 2)) {
    if (l.pp != 2) continue;
    EXPECT_TRUE(check_layout(c, l, 2).ok()) << layout_name(l);
    saw_first |= l.pp_layers == std::vector<int64_t>{3, 2};
    saw_last |= l.pp_layers == std::vector<int64_t>{2, 3};
  }
  EXPECT_TRUE(saw_first);
  EXPECT_TRUE(saw_last);
  Result<SearchResult> r = search_layouts(test_cluster(2, 1e6), c, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(std::any_of(r->ranked.begin(), r->ranked.end(),
                          [](const Prediction& p) { return p.layout.pp == 2; }));
}

// The split reaches the prediction: the pipeline is as slow as its fullest stage.
TEST(UnevenSplit, ALopsidedSplitIsPredictedSlowerThanANearEvenOne) {
  const config::RunConfig c = five_layers();
  const Cluster cluster = test_cluster(2, 1e6);
  Layout l{.dp = 1, .pp = 2, .micro_batch = 4};
  l.pp_layers = {3, 2};
  Result<Prediction> near_even = predict_layout(cluster, c, l, 2);
  l.pp_layers = {4, 1};
  Result<Prediction> lopsided = predict_layout(cluster, c, l, 2);
  ASSERT_TRUE(near_even.ok()) << near_even.status().to_string();
  ASSERT_TRUE(lopsided.ok()) << lopsided.status().to_string();
  EXPECT_GT(lopsided->step_s, near_even->step_s);
  // Rank 0's weights follow its layers.
  EXPECT_GT(lopsided->memory[0].weights_mib, near_even->memory[0].weights_mib);
}

// --evaluate takes the config's own split, and the flags that run a layout carry it (or clear
// one the config file has, for an even layout).
TEST(UnevenSplit, TheConfigsSplitIsEvaluatedAndWrittenAsAFlag) {
  config::RunConfig c = five_layers();
  c.parallel.pp = 2;
  c.parallel.pp_layers = {2, 3};
  Result<Layout> l = layout_of(c, 2);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(l->pp_layers, (std::vector<int64_t>{2, 3}));
  EXPECT_NE(layout_name(*l).find("split2+3"), std::string::npos) << layout_name(*l);
  const std::vector<std::string> flags = set_flags(*l);
  EXPECT_NE(std::find(flags.begin(), flags.end(), "parallel.pp_layers=[2,3]"), flags.end());
  EXPECT_TRUE(predict_layout(test_cluster(2, 1e6), c, *l, 2).ok());
  const std::vector<std::string> even = set_flags(Layout{});
  EXPECT_NE(std::find(even.begin(), even.end(), "parallel.pp_layers=[]"), even.end());
  // A split that the trainer refuses is refused with its message.
  c.parallel.pp_layers = {4, 2};
  Result<Layout> bad = layout_of(c, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("parallel.pp_layers"), std::string::npos);
}

}  // namespace
}  // namespace ms::plan
