#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <thread>

#include "io/directory_lock.h"
#include "supervise/supervisor.h"
#include "train/run_dir.h"

namespace ms::supervise {
namespace {

// A lock let go while the supervisor waits: the restart goes ahead.
TEST(RunDirReleaseTest, WaitsUntilTheEndedJobLetsGo) {
  const std::string dir = testing::TempDir() + "/run_dir_release_1";
  Result<io::DirectoryLock> lock = io::DirectoryLock::acquire(dir, train::kRunDirLockName);
  ASSERT_TRUE(lock.ok());
  std::optional<io::DirectoryLock> held(std::move(*lock));
  std::thread release([&held] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    held.reset();
  });
  const auto start = std::chrono::steady_clock::now();
  const Status status = wait_for_run_dir_release(dir, 30);
  const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
  release.join();
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_GE(waited.count(), 0.4);
  // Nothing is held afterwards: the next job can take the directory.
  EXPECT_TRUE(io::DirectoryLock::acquire(dir, train::kRunDirLockName).ok());
}

// A lock held past the timeout stops the supervisor with the holder named.
TEST(RunDirReleaseTest, AHolderThatStaysIsNamed) {
  const std::string dir = testing::TempDir() + "/run_dir_release_2";
  auto held = io::DirectoryLock::acquire(dir, train::kRunDirLockName);
  ASSERT_TRUE(held.ok());
  const Status status = wait_for_run_dir_release(dir, 0.3);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("held by pid"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("not starting an attempt"), std::string::npos);
}

TEST(RunDirReleaseTest, AFreeDirectoryIsNoWait) {
  EXPECT_TRUE(wait_for_run_dir_release(testing::TempDir() + "/run_dir_release_3", 0).ok());
}

}  // namespace
}  // namespace ms::supervise
