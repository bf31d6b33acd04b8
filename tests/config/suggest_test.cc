// Edit distance and did-you-mean: the typo model behind every "unknown key" suggestion.
#include "config/suggest.h"

#include <gtest/gtest.h>

namespace ms::config {
namespace {

TEST(EditDistance, CountsInsertDeleteSubstitute) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("lr", "lr"), 0u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("lrr", "lr"), 1u);
  EXPECT_EQ(edit_distance("lr", "lrr"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(EditDistance, AdjacentSwapIsOneEdit) {
  EXPECT_EQ(edit_distance("stpes", "steps"), 1u);
  EXPECT_EQ(edit_distance("ab", "ba"), 1u);
}

TEST(ClosestMatch, SuggestsPlausibleTypos) {
  const std::vector<std::string> keys = {"lr", "betas", "eps", "warmup_steps", "min_lr"};
  EXPECT_EQ(closest_match("lrr", keys), "lr");
  EXPECT_EQ(closest_match("btas", keys), "betas");
  EXPECT_EQ(closest_match("warmup_stpes", keys), "warmup_steps");
  EXPECT_EQ(closest_match("warmpu_step", keys), "warmup_steps");
}

TEST(ClosestMatch, StaysQuietForUnrelatedNames) {
  const std::vector<std::string> keys = {"dp", "tp", "pp"};
  EXPECT_EQ(closest_match("xyz", keys), std::nullopt);
  EXPECT_EQ(closest_match("zz", keys), std::nullopt);
  EXPECT_EQ(closest_match("anything", {}), std::nullopt);
}

TEST(ClosestMatch, TiesGoToTheEarlierCandidate) {
  EXPECT_EQ(closest_match("xp", {"dp", "tp"}), "dp");
}

}  // namespace
}  // namespace ms::config
