// The trainer's fault-injection slots (train/fault_injection.h), which the supervisor sets.
#include "train/fault_injection.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

namespace ms::train {
namespace {

TEST(SlotsTest, ParsesTheSupervisorsList) {
  EXPECT_EQ(*parse_slots("0,1,3"), (std::vector<int64_t>{0, 1, 3}));
  EXPECT_NE(parse_slots("0,,3").status().message().find("entry 1"), std::string::npos);
  EXPECT_FALSE(parse_slots("0,x").ok());
  EXPECT_FALSE(parse_slots("-1").ok());
}

TEST(SlotsTest, RankToSlotFromTheEnvironment) {
  ::unsetenv(kSlotsEnv);
  EXPECT_EQ(*FaultInjector::slot_of(2), 2);
  ::setenv(kSlotsEnv, "0,1,3", 1);
  EXPECT_EQ(*FaultInjector::slot_of(2), 3);
  EXPECT_FALSE(FaultInjector::slot_of(3).ok());
  ::unsetenv(kSlotsEnv);
}

TEST(SlotsTest, FaultsFollowTheirSlot) {
  config::DebugConfig debug;
  debug.slow_rank = 3;
  debug.slow_ms = 250;
  debug.slow_from_step = 4;
  const FaultInjector slow(debug, 3, testing::TempDir());
  EXPECT_EQ(slow.slow_ms(3), 0);
  EXPECT_EQ(slow.slow_ms(4), 250);
  EXPECT_EQ(FaultInjector(debug, 2, testing::TempDir()).slow_ms(9), 0);
}

TEST(SlotsTest, TransientNanFiresOncePerRunDir) {
  const std::string dir = testing::TempDir() + "/slots_test_nan";
  std::filesystem::remove_all(dir);
  config::DebugConfig debug;
  debug.nan_rank = 1;
  debug.nan_step = 5;
  const FaultInjector once(debug, 1, dir);
  EXPECT_FALSE(once.poison_loss(4));
  EXPECT_TRUE(once.poison_loss(5));
  EXPECT_FALSE(once.poison_loss(5));  // the restarted run gets past it
  debug.nan_repeat = true;
  const FaultInjector always(debug, 1, dir);
  EXPECT_TRUE(always.poison_loss(5));
  EXPECT_TRUE(always.poison_loss(5));
  EXPECT_FALSE(FaultInjector(debug, 0, dir).poison_loss(5));
}

}  // namespace
}  // namespace ms::train
