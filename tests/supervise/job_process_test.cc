#include "supervise/job_process.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

namespace ms::supervise {
namespace {

std::optional<int> wait_for(JobProcess& job, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (auto status = job.poll()) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

TEST(JobProcessTest, ExitStatusOutputAndEnvironment) {
  const std::string log = testing::TempDir() + "/job_process_test.log";
  auto job = JobProcess::start({"sh", "-c", "echo \"slots $MS_TEST_SLOTS\"; exit 3"},
                               {{"MS_TEST_SLOTS", "0,1,3"}}, log, false);
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(wait_for(**job, 10), 3);
  (*job)->end(1, SIGTERM);
  EXPECT_NE((*job)->output().find("slots 0,1,3"), std::string::npos);
}

TEST(JobProcessTest, EndKillsWhatTheLauncherLeavesBehind) {
  // The launcher ignores SIGTERM and its child has a process group of its own, as mpirun's
  // ranks do: only the session sweep ends them.
  const std::string log = testing::TempDir() + "/job_process_test2.log";
  auto job = JobProcess::start(
      {"sh", "-c", "set -m; trap '' TERM; sleep 300 & echo started; wait"}, {}, log, false);
  ASSERT_TRUE(job.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  const int status = (*job)->end(0.5, SIGTERM);
  EXPECT_EQ(status, 128 + SIGKILL);
  // The reader thread sees end-of-file only when the orphan is gone too.
  job->reset();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
}

TEST(JobProcessTest, ACommandThatDoesNotExist) {
  auto job = JobProcess::start({"/nonexistent/ms-train"}, {}, testing::TempDir() + "/j3.log", false);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(wait_for(**job, 10), 127);
  (*job)->end(1, SIGTERM);
  EXPECT_NE((*job)->output().find("cannot run the job command"), std::string::npos);
}

}  // namespace
}  // namespace ms::supervise
