// DirectoryLock: one holder per (directory, name); a refusal names the holder's pid and host;
// the lock goes with its holder, whether destroyed or ended by _exit, and is not inherited by a
// forked child's own attempt.
#include "io/directory_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>

#include "tests/io/temp_dir.h"

namespace ms::io {
namespace {

using testing::TempDir;

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

TEST(DirectoryLock, SecondHolderIsRefusedWithTheFirstNamed) {
  TempDir dir;
  Result<DirectoryLock> first = DirectoryLock::acquire(dir.path(), "train.lock");
  ASSERT_TRUE(first.ok()) << first.status().message();
  Result<DirectoryLock> second = DirectoryLock::acquire(dir.path(), "train.lock");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  const std::string& m = second.status().message();
  EXPECT_NE(m.find(dir.file("train.lock")), std::string::npos) << m;
  EXPECT_NE(m.find("pid " + std::to_string(::getpid()) + " on host " + this_host()),
            std::string::npos)
      << m;
}

TEST(DirectoryLock, OtherNamesAreIndependent) {
  TempDir dir;
  Result<DirectoryLock> train = DirectoryLock::acquire(dir.path(), "train.lock");
  Result<DirectoryLock> supervise = DirectoryLock::acquire(dir.path(), "supervise.lock");
  EXPECT_TRUE(train.ok());
  EXPECT_TRUE(supervise.ok());
}

TEST(DirectoryLock, ReleasedOnDestruction) {
  TempDir dir;
  std::optional<Result<DirectoryLock>> first = DirectoryLock::acquire(dir.path(), "x.lock");
  ASSERT_TRUE(first->ok());
  first.reset();
  EXPECT_TRUE(DirectoryLock::acquire(dir.path(), "x.lock").ok());
}

TEST(DirectoryLock, CreatesTheDirectory) {
  TempDir dir;
  Result<DirectoryLock> lock = DirectoryLock::acquire(dir.file("a/b"), "x.lock");
  ASSERT_TRUE(lock.ok()) << lock.status().message();
  EXPECT_EQ(lock->path(), dir.file("a/b/x.lock"));
}

// A forked child opens the file anew, so its attempt meets the parent's lock.
TEST(DirectoryLock, ForkedChildIsRefused) {
  TempDir dir;
  Result<DirectoryLock> parent = DirectoryLock::acquire(dir.path(), "x.lock");
  ASSERT_TRUE(parent.ok());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Result<DirectoryLock> again = DirectoryLock::acquire(dir.path(), "x.lock");
    const bool named = !again.ok() && again.status().message().find(
                                          "pid " + std::to_string(::getppid())) != std::string::npos;
    ::_exit(named ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// A holder that ends without running destructors (a crash, SIGKILL) leaves no stale lock.
TEST(DirectoryLock, ReleasedWhenTheHolderExits) {
  TempDir dir;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Result<DirectoryLock> lock = DirectoryLock::acquire(dir.path(), "x.lock");
    const char byte = lock.ok() ? 1 : 0;
    [[maybe_unused]] ssize_t n = ::write(ready[1], &byte, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(byte, 1);
  Result<DirectoryLock> held = DirectoryLock::acquire(dir.path(), "x.lock");
  ASSERT_FALSE(held.ok());
  EXPECT_NE(held.status().message().find("pid " + std::to_string(child)), std::string::npos)
      << held.status().message();
  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(DirectoryLock::acquire(dir.path(), "x.lock").ok());
}

}  // namespace
}  // namespace ms::io
