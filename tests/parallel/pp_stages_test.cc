// Pipeline stage cuts: even by default, explicit lists honoured exactly, and every cut that
// would drop or invent a layer refused with cuts that would work.
#include <gtest/gtest.h>

#include "parallel/pp_stages.h"

namespace ms::parallel {
namespace {

TEST(PpStages, EvenCutsCoverEveryLayerOnce) {
  const auto s = pp_stage_layers(8, 4, 1, {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<StageLayers>{{0, 2}, {2, 2}, {4, 2}, {6, 2}}));
  const auto v = pp_stage_layers(8, 2, 2, {});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->size(), 4u);
  EXPECT_EQ(v->back(), (StageLayers{6, 2}));
  EXPECT_EQ(*pp_stage_layers(5, 1, 1, {}), (std::vector<StageLayers>{{0, 5}}));
}

TEST(PpStages, ExplicitCutsAreHonoured) {
  const auto s = pp_stage_layers(10, 4, 1, {3, 3, 2, 2});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<StageLayers>{{0, 3}, {3, 3}, {6, 2}, {8, 2}}));
}

TEST(PpStages, AnUnevenCutIsRefusedWithCutsThatWork) {
  const auto s = pp_stage_layers(10, 4, 1, {});
  ASSERT_FALSE(s.ok());
  const std::string& m = s.status().message();
  EXPECT_NE(m.find("model.n_layers (10) does not split evenly"), std::string::npos) << m;
  EXPECT_NE(m.find("parallel.pp_layers, e.g. [3, 3, 2, 2]"), std::string::npos) << m;
  EXPECT_NE(m.find("1, 2, 5, 10"), std::string::npos) << m;
  EXPECT_FALSE(pp_stage_layers(3, 4, 1, {}).ok());  // more stages than layers
}

TEST(PpStages, ExplicitCutsThatDropOrInventLayersAreRefused) {
  auto s = pp_stage_layers(10, 4, 1, {3, 3, 2, 1});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("1 missing"), std::string::npos) << s.status().message();
  s = pp_stage_layers(10, 4, 1, {3, 3, 3, 3});
  EXPECT_NE(s.status().message().find("2 too many"), std::string::npos) << s.status().message();
  s = pp_stage_layers(10, 4, 1, {5, 5});
  EXPECT_NE(s.status().message().find("needs one per stage"), std::string::npos);
  s = pp_stage_layers(10, 2, 1, {10, 0});
  EXPECT_NE(s.status().message().find("at least 1"), std::string::npos);
  EXPECT_FALSE(pp_stage_layers(0, 1, 1, {}).ok());
}

}  // namespace
}  // namespace ms::parallel
