// The logger: level names and which ranks print which levels.
#include "core/logging.h"

#include <gtest/gtest.h>

namespace ms::log {
namespace {

// Restores the logger's identity and level after each test.
class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_level_ = level(); }
  void TearDown() override {
    set_identity("", 0);
    set_all_ranks(false);
    set_level(saved_level_);
  }
  Level saved_level_ = Level::kInfo;
};

TEST_F(LoggingTest, ParseLevelAcceptsNamesCaseInsensitively) {
  EXPECT_EQ(*parse_level("debug"), Level::kDebug);
  EXPECT_EQ(*parse_level("INFO"), Level::kInfo);
  EXPECT_EQ(*parse_level("warn"), Level::kWarn);
  EXPECT_EQ(*parse_level("Warning"), Level::kWarn);
  EXPECT_EQ(*parse_level("error"), Level::kError);
  EXPECT_EQ(*parse_level("off"), Level::kOff);
}

TEST_F(LoggingTest, ParseLevelRejectsUnknownNamesListingTheChoices) {
  Result<Level> r = parse_level("verbose");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'verbose'"), std::string::npos);
  EXPECT_NE(r.status().message().find("debug, info, warn, error or off"), std::string::npos);
}

TEST_F(LoggingTest, LevelNamesRoundTrip) {
  for (Level l : {Level::kDebug, Level::kInfo, Level::kWarn, Level::kError, Level::kOff}) {
    EXPECT_EQ(*parse_level(level_name(l)), l);
  }
}

TEST_F(LoggingTest, RankZeroPrintsInfoOtherRanksOnlyWarnings) {
  set_level(Level::kInfo);
  set_identity("node07", 0);
  EXPECT_TRUE(enabled(Level::kInfo));
  EXPECT_FALSE(enabled(Level::kDebug));
  set_identity("node07", 3);
  EXPECT_EQ(rank(), 3);
  EXPECT_EQ(host(), "node07");
  EXPECT_FALSE(enabled(Level::kInfo));
  EXPECT_TRUE(enabled(Level::kWarn));
  EXPECT_TRUE(enabled(Level::kError));
}

TEST_F(LoggingTest, AllRanksLetsEveryRankPrintInfo) {
  set_level(Level::kInfo);
  set_identity("node07", 3);
  set_all_ranks(true);
  EXPECT_TRUE(enabled(Level::kInfo));
}

TEST_F(LoggingTest, LevelOffSilencesEverything) {
  set_level(Level::kOff);
  EXPECT_FALSE(enabled(Level::kError));
}

TEST_F(LoggingTest, LogFileThatCannotBeOpenedIsAnIOError) {
  Status s = set_log_file("/nonexistent-dir/log.txt");
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("/nonexistent-dir/log.txt"), std::string::npos);
  EXPECT_TRUE(set_log_file("").ok());
}

}  // namespace
}  // namespace ms::log
