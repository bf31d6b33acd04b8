// The pread/pwrite loops under scripted system calls: short transfers and EINTR are retried
// until done, real errors are reported with the path, and a read stops only at end of file.
#include "io/posix_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <string>

#include "io/env.h"

namespace ms::io {
namespace {

// The fake device: an in-memory file plus a script of what each call does. A scripted entry
// >= 0 caps the bytes transferred by that call; a negative entry fails it with that errno.
// Calls beyond the script transfer everything asked.
struct FakeDevice {
  std::string contents;
  std::deque<int> script;
  int calls = 0;
};
FakeDevice g_device;

// Returns the call's byte cap, or -1 after setting errno when the script says the call fails.
ssize_t next_cap(size_t count) {
  ++g_device.calls;
  if (g_device.script.empty()) return static_cast<ssize_t>(count);
  int step = g_device.script.front();
  g_device.script.pop_front();
  if (step < 0) {
    errno = -step;
    return -1;
  }
  return std::min<ssize_t>(step, static_cast<ssize_t>(count));
}

ssize_t fake_pread(int, void* buf, size_t count, off_t offset) {
  ssize_t cap = next_cap(count);
  if (cap < 0) return -1;
  size_t start = std::min(static_cast<size_t>(offset), g_device.contents.size());
  size_t n = std::min(static_cast<size_t>(cap), g_device.contents.size() - start);
  std::memcpy(buf, g_device.contents.data() + start, n);
  return static_cast<ssize_t>(n);
}

ssize_t fake_pwrite(int, const void* buf, size_t count, off_t offset) {
  ssize_t cap = next_cap(count);
  if (cap <= 0) return cap;
  size_t end = static_cast<size_t>(offset) + static_cast<size_t>(cap);
  if (g_device.contents.size() < end) g_device.contents.resize(end);
  std::memcpy(g_device.contents.data() + offset, buf, static_cast<size_t>(cap));
  return cap;
}

const SysIo kFake{&fake_pread, &fake_pwrite};

class PosixIoTest : public ::testing::Test {
 protected:
  void SetUp() override { g_device = FakeDevice{}; }
};

std::span<std::byte> bytes_of(std::string& s) { return std::as_writable_bytes(std::span(s)); }

TEST_F(PosixIoTest, ShortWritesAndInterruptionsAreRetriedUntilEverythingIsWritten) {
  g_device.script = {3, -EINTR, 1, 2, -EINTR};
  Status status = pwrite_full(kFake, 7, "/data/f", 0, as_bytes("hello world"));
  ASSERT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(g_device.contents, "hello world");
  EXPECT_EQ(g_device.calls, 6);
}

TEST_F(PosixIoTest, WriteErrorNamesPathAndOffset) {
  g_device.script = {4, -ENOSPC};
  Status status = pwrite_full(kFake, 7, "/data/f", 100, as_bytes("0123456789"));
  EXPECT_EQ(status.code(), StatusCode::kIOError);
  EXPECT_NE(status.message().find("/data/f"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("offset 104"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(std::strerror(ENOSPC)), std::string::npos);
}

TEST_F(PosixIoTest, WriteThatMakesNoProgressIsAnError) {
  g_device.script = {0};
  Status status = pwrite_full(kFake, 7, "/data/f", 0, as_bytes("abc"));
  EXPECT_EQ(status.code(), StatusCode::kIOError);
  EXPECT_NE(status.message().find("no progress"), std::string::npos);
}

TEST_F(PosixIoTest, ShortReadsAndInterruptionsAreRetriedUntilFull) {
  g_device.contents = "abcdefghij";
  g_device.script = {2, -EINTR, 3};
  std::string dest(8, '\0');
  Result<size_t> got = pread_full(kFake, 7, "/data/f", 1, bytes_of(dest));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, 8u);
  EXPECT_EQ(dest, "bcdefghi");
}

TEST_F(PosixIoTest, ReadStopsShortOnlyAtEndOfFile) {
  g_device.contents = "abcdef";
  g_device.script = {1, 1};
  std::string dest(10, '\0');
  Result<size_t> got = pread_full(kFake, 7, "/data/f", 2, bytes_of(dest));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 4u);
  EXPECT_EQ(dest.substr(0, 4), "cdef");
}

TEST_F(PosixIoTest, ReadErrorNamesPath) {
  g_device.contents = "abcdef";
  g_device.script = {-EIO};
  std::string dest(4, '\0');
  Result<size_t> got = pread_full(kFake, 7, "/data/g", 0, bytes_of(dest));
  EXPECT_EQ(got.status().code(), StatusCode::kIOError);
  EXPECT_NE(got.status().message().find("/data/g"), std::string::npos);
}

}  // namespace
}  // namespace ms::io
