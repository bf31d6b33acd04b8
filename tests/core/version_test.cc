// Version information baked in at build time.
#include "core/version.h"

#include <gtest/gtest.h>

namespace ms {
namespace {

TEST(Version, IsTheProjectVersion) { EXPECT_EQ(version(), "0.1.0"); }

TEST(Version, GitRevisionIsKnownInACheckout) {
  EXPECT_FALSE(git_revision().empty());
  EXPECT_EQ(git_revision().find(' '), std::string_view::npos);
}

TEST(Version, StringCombinesBoth) {
  EXPECT_EQ(version_string(), "0.1.0 (git " + std::string(git_revision()) + ")");
}

}  // namespace
}  // namespace ms
