#include "supervise/live_telemetry.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace ms::supervise {
namespace {

std::string step_line(int rank, int step, double t) {
  return R"({"kind":"step","t":)" + std::to_string(t) + R"(,"host":"h","rank":)" +
         std::to_string(rank) + R"(,"mesh":{"dp":0,"tp":0,"pp":0},"step":)" +
         std::to_string(step) +
         R"(,"loss":1,"grad_norm":1,"lr":0.1,"tokens_per_s":1,"step_s":0.5,"phases":{"data_s":0,"fwd_s":0.1,"bwd_s":0.2,"comm_wait_s":0,"optim_s":0}})";
}

TEST(LiveTelemetryTest, ReadsOnlyWhatTheFilesGained) {
  const std::string dir = testing::TempDir() + "/live_telemetry_test";
  std::filesystem::remove_all(dir);
  LiveTelemetry live(dir);
  EXPECT_TRUE(live.poll()->empty());  // no directory yet
  std::filesystem::create_directories(dir);
  std::ofstream out(dir + "/rank-00000.jsonl");
  out << step_line(0, 1, 100) << "\n" << step_line(0, 2, 101) << "\n" << std::flush;
  auto first = live.poll();
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[1].step.step, 2);
  // Half a line is left for the next poll.
  const std::string third = step_line(0, 3, 102);
  out << third.substr(0, 20) << std::flush;
  EXPECT_TRUE(live.poll()->empty());
  out << third.substr(20) << "\n" << std::flush;
  auto next = live.poll();
  ASSERT_EQ(next->size(), 1u);
  EXPECT_EQ((*next)[0].step.step, 3);
  EXPECT_EQ((*next)[0].line, 3u);
  EXPECT_EQ(live.since(101.5)[0].steps.size(), 1u);
  live.forget_before(102);
  EXPECT_EQ(live.since(0)[0].steps.size(), 1u);
  // A bad line is named by file and line.
  out << "{\"kind\":\"step\"}\n" << std::flush;
  const auto bad = live.poll();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rank-00000.jsonl:4"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace ms::supervise
