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
  // A bad line is named by file and line, and passed over.
  out << "{\"kind\":\"step\"}\n" << step_line(0, 4, 103) << "\n" << std::flush;
  const auto bad = live.poll();
  ASSERT_TRUE(bad.ok()) << bad.status().message();
  ASSERT_EQ(bad->size(), 1u);
  EXPECT_EQ((*bad)[0].step.step, 4);
  ASSERT_EQ(live.skipped().size(), 1u);
  EXPECT_NE(live.skipped()[0].find("rank-00000.jsonl:4"), std::string::npos) << live.skipped()[0];
}

// Two processes writing one rank file (an ended attempt's rank beside the restarted one) can
// glue half a line to another: the reader passes over that line, reads each record once, and
// goes on reading every file.
TEST(LiveTelemetryTest, ATornLineDoesNotStopTheReading) {
  const std::string dir = testing::TempDir() + "/live_telemetry_torn";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  LiveTelemetry live(dir);
  std::ofstream rank0(dir + "/rank-00000.jsonl"), rank1(dir + "/rank-00001.jsonl");
  const std::string cut = step_line(0, 2, 101);
  rank0 << step_line(0, 1, 100) << "\n" << cut.substr(0, 40) << step_line(0, 2, 110) << "\n"
        << step_line(0, 3, 111) << "\n" << std::flush;
  rank1 << step_line(1, 1, 100) << "\n" << std::flush;
  auto first = live.poll();
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_EQ(first->size(), 3u);  // rank 0's steps 1 and 3, rank 1's step 1
  EXPECT_EQ((*first)[1].step.step, 3);
  EXPECT_EQ((*first)[1].line, 3u);
  EXPECT_EQ((*first)[2].rank, 1);
  EXPECT_EQ(live.skipped().size(), 1u);
  rank0 << step_line(0, 4, 112) << "\n" << std::flush;
  auto next = live.poll();
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next->size(), 1u);  // nothing read twice
  EXPECT_EQ((*next)[0].step.step, 4);
  EXPECT_TRUE(live.skipped().empty());
  EXPECT_EQ(live.since(0)[0].steps.size(), 3u);
}

}  // namespace
}  // namespace ms::supervise
