// Clock offset against rank 0, and the watchdog reporting a hung collective, under mpirun.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm/clock_offset.h"
#include "comm/mpi_communicator.h"
#include "comm/watchdog.h"
#include "core/logging.h"

namespace ms::comm {
namespace {

class ClockAndWatchdog : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = MpiCommunicator::world();
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    comm_ = std::move(world).value();
    char pattern[] = "/tmp/ms-comm-watchdog-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Waits (up to 20 s) for the watchdog to write its report.
  static bool wait_for_report(const Watchdog& watchdog) {
    for (int i = 0; i < 2000 && watchdog.reports_written() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return watchdog.reports_written() > 0;
  }

  nlohmann::json read_report(int rank) const {
    std::ifstream in(inflight_report_path(dir_, rank));
    return nlohmann::json::parse(in);
  }

  std::unique_ptr<MpiCommunicator> comm_;
  std::string dir_;
};

TEST_F(ClockAndWatchdog, ClockOffsetOnOneHostIsSmall) {
  auto offset = measure_clock_offset(*comm_, 5);
  ASSERT_TRUE(offset.ok()) << offset.status().to_string();
  if (comm_->rank() == 0) {
    EXPECT_EQ(offset->offset_s, 0.0);
    EXPECT_EQ(offset->rtt_s, 0.0);
  } else {
    // Same host, same clock: only measurement noise, bounded by the round trip.
    EXPECT_GE(offset->rtt_s, 0.0);
    EXPECT_LT(offset->rtt_s, 5.0);
    EXPECT_LT(std::fabs(offset->offset_s), 1.0);
  }
}

TEST_F(ClockAndWatchdog, ReportsAnOperationPastItsTimeout) {
  auto watchdog = Watchdog::start({.timeout_s = 0.05, .dir = dir_, .poll_s = 0.01});
  ASSERT_TRUE(watchdog.ok());
  (*watchdog)->begin(make_inflight_op("allreduce", "dp", {0, 2}, 7, 4096));
  ASSERT_TRUE(wait_for_report(**watchdog)) << (*watchdog)->last_report_status().to_string();
  (*watchdog)->end();
  EXPECT_EQ((*watchdog)->reports_written(), 1);  // once per operation
  const nlohmann::json doc = read_report(log::rank());
  EXPECT_EQ(doc["op"], "allreduce");
  EXPECT_EQ(doc["group"], "dp");
  EXPECT_EQ(doc["group_ranks"], nlohmann::json({0, 2}));
  EXPECT_EQ(doc["seq"], 7);
  EXPECT_EQ(doc["bytes"], 4096);
  EXPECT_EQ(doc["rank"], log::rank());
  EXPECT_EQ(doc["pid"], getpid());
  EXPECT_GE(doc["waiting_s"].get<double>(), 0.05);
  EXPECT_FALSE(doc["stack"].empty());
}

// Rank 0 enters a barrier at once; the others join only after 1.5 s, well past rank 0's 0.3 s
// timeout, so rank 0's watchdog reports the barrier while it is still blocked.
TEST_F(ClockAndWatchdog, ReportsAHungBarrier) {
  if (comm_->size() < 2) GTEST_SKIP() << "needs a peer that is late";
  auto watchdog = Watchdog::start({.timeout_s = 0.3, .dir = dir_, .poll_s = 0.02});
  ASSERT_TRUE(watchdog.ok());
  comm_->set_watchdog(*watchdog);
  const uint64_t seq = comm_->next_seq();
  if (comm_->rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_TRUE(comm_->barrier().ok());
  comm_->set_watchdog(nullptr);
  if (comm_->rank() != 0) return;

  ASSERT_TRUE(wait_for_report(**watchdog)) << (*watchdog)->last_report_status().to_string();
  EXPECT_EQ((*watchdog)->reports_written(), 1);
  const nlohmann::json doc = read_report(0);
  EXPECT_EQ(doc["op"], "barrier");
  EXPECT_EQ(doc["group"], "world");
  EXPECT_EQ(doc["group_ranks"].size(), static_cast<size_t>(comm_->size()));
  EXPECT_EQ(doc["seq"], seq);
  EXPECT_EQ(doc["host"], log::host());
  EXPECT_GE(doc["waiting_s"].get<double>(), 0.3);
  EXPECT_FALSE(doc["stack"].empty());
}

}  // namespace
}  // namespace ms::comm
