#include "supervise/job_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
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

// A job that ignores the first signal (a hung rank cannot save at a step boundary) gets SIGTERM
// before SIGKILL, since only SIGTERM makes srun cancel its step and free its allocation.
TEST(JobProcessTest, EndSendsSigtermBeforeKilling) {
  const std::string log = testing::TempDir() + "/job_process_test5.log";
  auto job = JobProcess::start(
      {"sh", "-c", "trap '' USR1; trap 'exit 7' TERM; echo started; "
                   "while :; do sleep 0.05; done"},
      {}, log, false);
  ASSERT_TRUE(job.ok());
  for (int i = 0; i < 200 && (*job)->output().find("started") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ((*job)->end(0.3, SIGUSR1), 7);  // the TERM trap's status, not 128 + SIGKILL
}

// Whether process `pid` has ended: gone, or a zombie nobody has reaped yet.
bool ended(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  return close == std::string::npos || text.compare(close + 2, 1, "Z") == 0;
}

// A supervisor killed by SIGKILL runs no destructor; the job must end all the same, or a rerun
// starts a second job on the same run directory.
TEST(JobProcessTest, TheJobEndsWhenItsSupervisorIsKilled) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t supervisor = ::fork();
  ASSERT_GE(supervisor, 0);
  if (supervisor == 0) {
    auto job = JobProcess::start({"sleep", "300"}, {}, testing::TempDir() + "/j4.log", false);
    const pid_t pid = job.ok() ? (*job)->pid() : -1;
    [[maybe_unused]] ssize_t n = ::write(fds[1], &pid, sizeof(pid));
    ::pause();
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t job = -1;
  ASSERT_EQ(::read(fds[0], &job, sizeof(job)), static_cast<ssize_t>(sizeof(job)));
  ::close(fds[0]);
  ASSERT_GT(job, 0);
  ::kill(supervisor, SIGKILL);
  ASSERT_EQ(::waitpid(supervisor, nullptr, 0), supervisor);
  for (int i = 0; i < 500 && !ended(job); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(ended(job)) << "the job (pid " << job << ") outlived its supervisor";
  if (!ended(job)) ::kill(job, SIGKILL);
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
