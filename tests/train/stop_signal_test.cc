// The training stop flag (train/stop_signal.h): SIGINT and SIGTERM set it and name themselves;
// SIGUSR1 and SIGUSR2 stop training as SIGTERM does.
#include "train/stop_signal.h"

#include <gtest/gtest.h>

#include <csignal>

namespace ms::train {
namespace {

class StopSignal : public ::testing::Test {
 protected:
  void SetUp() override {
    install_stop_handlers();
    treat_user_signals_as_term();
    clear_stop_request();
  }
  void TearDown() override {
    clear_stop_request();
    for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) std::signal(s, SIG_DFL);
  }
};

TEST_F(StopSignal, NothingArrivedNothingRequested) {
  EXPECT_FALSE(stop_requested());
  EXPECT_EQ(stop_signal(), 0);
}

TEST_F(StopSignal, InterruptAndTerminateSetTheFlag) {
  for (int s : {SIGINT, SIGTERM}) {
    clear_stop_request();
    ASSERT_EQ(std::raise(s), 0);
    EXPECT_TRUE(stop_requested());
    EXPECT_EQ(stop_signal(), s);
  }
}

TEST_F(StopSignal, UserSignalsStopAsTerminateDoes) {
  for (int s : {SIGUSR1, SIGUSR2}) {
    clear_stop_request();
    ASSERT_EQ(std::raise(s), 0);
    EXPECT_TRUE(stop_requested());
    EXPECT_EQ(stop_signal(), SIGTERM);
  }
}

}  // namespace
}  // namespace ms::train
