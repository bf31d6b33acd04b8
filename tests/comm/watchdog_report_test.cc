// The in-flight report the watchdog writes: <dir>/inflight/rank-NNNNN.json with a fixed set of
// keys. (The watchdog thread itself is exercised under mpirun in watchdog_test.cc.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "comm/watchdog.h"

namespace ms::comm {
namespace {

TEST(InflightReport, PathIsPerRankUnderInflight) {
  EXPECT_EQ(inflight_report_path("/runs/a", 3), "/runs/a/inflight/rank-00003.json");
  EXPECT_EQ(inflight_report_path("runs", 12345), "runs/inflight/rank-12345.json");
}

TEST(InflightReport, JsonHoldsTheOperationAndItsCallSite) {
  const InflightOp op = make_inflight_op("allreduce", "dp", {1, 3, 5}, 42, 4096);
  EXPECT_GT(op.stack.depth, 0);
  const auto doc =
      nlohmann::json::parse(inflight_report_json(op, 3, "node07", 1764480000.5, 31.25));
  EXPECT_EQ(doc["rank"], 3);
  EXPECT_EQ(doc["host"], "node07");
  EXPECT_EQ(doc["pid"], getpid());
  EXPECT_EQ(doc["t"], 1764480000.5);
  EXPECT_EQ(doc["op"], "allreduce");
  EXPECT_EQ(doc["group"], "dp");
  EXPECT_EQ(doc["group_ranks"], nlohmann::json({1, 3, 5}));
  EXPECT_EQ(doc["seq"], 42);
  EXPECT_EQ(doc["bytes"], 4096);
  EXPECT_EQ(doc["waiting_s"], 31.25);
  ASSERT_TRUE(doc["stack"].is_array());
  EXPECT_EQ(doc["stack"].size(), static_cast<size_t>(op.stack.depth));
  EXPECT_EQ(doc.size(), 11u);
}

TEST(Watchdog, RejectsBadOptions) {
  EXPECT_EQ(Watchdog::start({.timeout_s = 0, .dir = "/tmp"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Watchdog::start({.timeout_s = 1, .dir = ""}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ms::comm
