// The Env contract, checked on both read/write backends: io_uring (skipped with a message where
// the kernel or container forbids it) and the pread/pwrite fallback.
#include "io/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include <unistd.h>

#include "core/buffer.h"
#include "io/uring_queue.h"
#include "tests/io/temp_dir.h"

namespace ms::io {
namespace {

using testing::TempDir;

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen());
  return s;
}

std::span<std::byte> bytes_of(std::string& s) { return std::as_writable_bytes(std::span(s)); }

class EnvTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override { MS_IO_ENV_OR_SKIP(env_, GetParam()); }

  std::unique_ptr<File> open(const std::string& path, OpenMode mode) {
    Result<std::unique_ptr<File>> file = env_->open(path, mode);
    EXPECT_TRUE(file.ok()) << file.status().to_string();
    return file.ok() ? std::move(file).value() : nullptr;
  }

  std::unique_ptr<Env> env_;
  TempDir dir_;
};

TEST_P(EnvTest, ReportsItsBackend) {
  EXPECT_EQ(env_->backend_name(), GetParam() == IoBackend::kUring ? "io_uring" : "pread/pwrite");
}

TEST_P(EnvTest, WriteAtThenReadAtRoundTrips) {
  std::string data = random_bytes(3 << 20, 1);
  auto file = open(dir_.file("a"), OpenMode::kTruncate);
  ASSERT_TRUE(file->write_at(0, data).ok());
  ASSERT_TRUE(file->sync().ok());
  EXPECT_EQ(*file->size(), data.size());

  std::string back(data.size(), '\0');
  Result<size_t> got = file->read_at(0, bytes_of(back));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, data.size());
  EXPECT_EQ(back, data);
  EXPECT_TRUE(file->close().ok());
}

// The checkpoint writer's pattern: each piece's writeback starts as soon as it is appended, and
// one sync at the end. The hint changes nothing a reader sees.
TEST_P(EnvTest, WritebackStartedPieceByPieceKeepsTheContents) {
  const std::string data = random_bytes(3 << 20, 4);
  auto file = open(dir_.file("pieces"), OpenMode::kCreateNew);
  for (size_t at = 0; at < data.size(); at += 1 << 20) {
    const uint64_t offset = file->append_offset();
    ASSERT_TRUE(file->append(std::string_view(data).substr(at, 1 << 20)).ok());
    ASSERT_TRUE(file->start_writeback(offset, 1 << 20).ok());
  }
  ASSERT_TRUE(file->sync().ok());
  std::string back(data.size(), '\0');
  ASSERT_EQ(*file->read_at(0, bytes_of(back)), data.size());
  EXPECT_EQ(back, data);
  ASSERT_TRUE(file->close().ok());
  EXPECT_EQ(file->start_writeback(0, 1).code(), StatusCode::kFailedPrecondition);
}

TEST_P(EnvTest, TruncateCutsAndExtendsTheFile) {
  std::string data = random_bytes(10000, 5);
  auto file = open(dir_.file("cut"), OpenMode::kCreateNew);
  ASSERT_TRUE(file->write_at(0, data).ok());
  ASSERT_TRUE(file->truncate(4321).ok());
  EXPECT_EQ(*file->size(), 4321u);
  ASSERT_TRUE(file->truncate(5000).ok());
  std::string back(5000, '\x7f');
  ASSERT_EQ(*file->read_at(0, bytes_of(back)), 5000u);
  EXPECT_EQ(back.substr(0, 4321), data.substr(0, 4321));
  EXPECT_EQ(back.substr(4321), std::string(5000 - 4321, '\0')) << "extended with zeros";
  ASSERT_TRUE(file->close().ok());
  EXPECT_EQ(file->truncate(0).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(file->enable_direct_writes().status().code(), StatusCode::kFailedPrecondition);
}

// A direct file takes aligned writes from aligned memory; what it stores reads back the same.
TEST_P(EnvTest, DirectWritesStoreAlignedBlocks) {
  auto file = open(dir_.file("direct"), OpenMode::kCreateNew);
  Result<bool> direct = file->enable_direct_writes();
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  if (!*direct) GTEST_SKIP() << "the test directory's filesystem has no direct I/O";
  Buffer block(3 * kDirectIoAlignment, kDirectIoAlignment);
  std::string data = random_bytes(block.size(), 6);
  std::memcpy(block.data(), data.data(), data.size());
  ASSERT_TRUE(file->write_at(kDirectIoAlignment, block.bytes()).ok());
  ASSERT_TRUE(file->truncate(kDirectIoAlignment + data.size() - 10).ok());
  ASSERT_TRUE(file->sync().ok());
  ASSERT_TRUE(file->close().ok());
  auto reread = open(dir_.file("direct"), OpenMode::kRead);
  std::string back(kDirectIoAlignment + data.size() - 10, '\x7f');
  ASSERT_EQ(*reread->read_at(0, bytes_of(back)), back.size());
  EXPECT_EQ(back.substr(0, kDirectIoAlignment), std::string(kDirectIoAlignment, '\0'));
  EXPECT_EQ(back.substr(kDirectIoAlignment), data.substr(0, data.size() - 10));
}

TEST_P(EnvTest, AppendsGoToTheEndAndReopenKeepsContents) {
  std::string path = dir_.file("log");
  {
    auto file = open(path, OpenMode::kTruncate);
    ASSERT_TRUE(file->append("hello ").ok());
    ASSERT_TRUE(file->append("world").ok());
    EXPECT_EQ(file->append_offset(), 11u);
  }
  auto file = open(path, OpenMode::kReadWrite);
  EXPECT_EQ(file->append_offset(), 11u);
  ASSERT_TRUE(file->append("!").ok());
  std::string back(12, '\0');
  EXPECT_EQ(*file->read_at(0, bytes_of(back)), 12u);
  EXPECT_EQ(back, "hello world!");
}

TEST_P(EnvTest, ReadAtPastEndReturnsOnlyWhatExists) {
  auto file = open(dir_.file("short"), OpenMode::kTruncate);
  ASSERT_TRUE(file->write_at(0, "0123456789").ok());
  std::string back(8, '\0');
  EXPECT_EQ(*file->read_at(6, bytes_of(back)), 4u);
  EXPECT_EQ(back.substr(0, 4), "6789");
  EXPECT_EQ(*file->read_at(10, bytes_of(back)), 0u);
  EXPECT_EQ(*file->read_at(1000, bytes_of(back)), 0u);
}

TEST_P(EnvTest, SequentialReadAdvancesAndEndsWithZero) {
  auto file = open(dir_.file("seq"), OpenMode::kTruncate);
  ASSERT_TRUE(file->write_at(0, "abcdefg").ok());
  std::string chunk(3, '\0');
  std::string all;
  for (;;) {
    Result<size_t> got = file->read(bytes_of(chunk));
    ASSERT_TRUE(got.ok());
    if (*got == 0) break;
    all += chunk.substr(0, *got);
  }
  EXPECT_EQ(all, "abcdefg");
  file->seek(5);
  EXPECT_EQ(*file->read(bytes_of(chunk)), 2u);
  EXPECT_EQ(chunk.substr(0, 2), "fg");
}

TEST_P(EnvTest, ReadRangesFillsManyRangesAtOnce) {
  std::string data = random_bytes(1 << 20, 2);
  auto file = open(dir_.file("ranges"), OpenMode::kTruncate);
  ASSERT_TRUE(file->write_at(0, data).ok());

  // More ranges than the ring holds, of varying sizes and in no particular order.
  std::vector<std::string> buffers;
  std::vector<uint64_t> offsets;
  std::mt19937 gen(3);
  for (int i = 0; i < 300; ++i) {
    size_t len = 1 + gen() % 5000;
    offsets.push_back(gen() % (data.size() - len));
    buffers.emplace_back(len, '\0');
  }
  std::vector<ReadRange> ranges;
  for (size_t i = 0; i < buffers.size(); ++i) ranges.push_back({offsets[i], bytes_of(buffers[i])});
  Status status = env_->read_ranges(*file, ranges);
  ASSERT_TRUE(status.ok()) << status.to_string();
  for (size_t i = 0; i < buffers.size(); ++i) {
    ASSERT_EQ(buffers[i], data.substr(offsets[i], buffers[i].size())) << "range " << i;
  }
}

TEST_P(EnvTest, ReadRangesPastEndIsCorruptionNamingFileAndOffset) {
  std::string path = dir_.file("truncated");
  auto file = open(path, OpenMode::kTruncate);
  ASSERT_TRUE(file->write_at(0, std::string(100, 'x')).ok());
  std::string a(10, '\0');
  std::string b(50, '\0');
  std::vector<ReadRange> ranges{{0, bytes_of(a)}, {80, bytes_of(b)}};
  Status status = env_->read_ranges(*file, ranges);
  EXPECT_EQ(status.code(), StatusCode::kCorruption);
  EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("offset 80"), std::string::npos) << status.message();
}

TEST_P(EnvTest, ConcurrentPositionalReadsSeeTheirOwnRanges) {
  std::string data = random_bytes(1 << 18, 4);
  auto file = open(dir_.file("shared"), OpenMode::kTruncate);
  ASSERT_TRUE(file->write_at(0, data).ok());
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::string buf(4096, '\0');
      for (uint64_t off = t * 4096; off + 4096 <= data.size(); off += 4 * 4096) {
        Result<size_t> got = file->read_at(off, bytes_of(buf));
        if (!got.ok() || *got != buf.size() || buf != data.substr(off, 4096)) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST_P(EnvTest, OpenReportsMissingAndExistingFiles) {
  Result<std::unique_ptr<File>> missing = env_->open(dir_.file("nope"), OpenMode::kRead);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);

  open(dir_.file("once"), OpenMode::kCreateNew);
  Result<std::unique_ptr<File>> again = env_->open(dir_.file("once"), OpenMode::kCreateNew);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
}

TEST_P(EnvTest, ClosedFileRefusesFurtherUse) {
  auto file = open(dir_.file("closed"), OpenMode::kTruncate);
  ASSERT_TRUE(file->close().ok());
  EXPECT_EQ(file->append("x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(file->sync().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(file->close().code(), StatusCode::kFailedPrecondition);
}

TEST_P(EnvTest, WritingToAReadOnlyFileIsAnIOErrorNamingIt) {
  std::string path = dir_.file("ro");
  open(path, OpenMode::kTruncate);
  auto file = open(path, OpenMode::kRead);
  Status status = file->write_at(0, "x");
  EXPECT_EQ(status.code(), StatusCode::kIOError);
  EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
}

TEST_P(EnvTest, DirectoriesCanBeCreatedListedRenamedAndRemoved) {
  std::string nested = dir_.file("a/b/c");
  ASSERT_TRUE(env_->create_dirs(nested).ok());
  EXPECT_TRUE(env_->is_directory(nested));
  EXPECT_TRUE(env_->create_dir(nested).ok()) << "creating an existing directory is fine";
  open(nested + "/z", OpenMode::kTruncate);
  open(nested + "/y", OpenMode::kTruncate);
  EXPECT_EQ(*env_->list_dir(nested), (std::vector<std::string>{"y", "z"}));

  ASSERT_TRUE(env_->rename(dir_.file("a"), dir_.file("moved")).ok());
  EXPECT_FALSE(env_->exists(dir_.file("a")));
  EXPECT_TRUE(env_->exists(dir_.file("moved/b/c/y")));
  ASSERT_TRUE(env_->sync_dir(dir_.path()).ok());

  ASSERT_TRUE(env_->remove_all(dir_.file("moved")).ok());
  EXPECT_FALSE(env_->exists(dir_.file("moved")));
  EXPECT_TRUE(env_->remove_all(dir_.file("moved")).ok()) << "removing nothing is fine";
  EXPECT_EQ(env_->remove_file(dir_.file("moved")).code(), StatusCode::kNotFound);
  EXPECT_EQ(env_->list_dir(dir_.file("moved")).status().code(), StatusCode::kNotFound);
}

// A tree to clean holding links to a file and a directory outside it, a link inside it to its
// own subdirectory, and a dangling link: remove_all removes the tree and the links, and nothing
// the links point to.
TEST_P(EnvTest, RemoveAllRemovesLinksAsLinksAndNeverWhatTheyPointTo) {
  const std::string outside = dir_.file("other-run");
  ASSERT_TRUE(env_->create_dirs(outside + "/step-00000010").ok());
  open(outside + "/step-00000010/manifest.json", OpenMode::kTruncate);
  open(outside + "/notes.txt", OpenMode::kTruncate);

  const std::string tree = dir_.file("tree");
  ASSERT_TRUE(env_->create_dirs(tree + "/inner").ok());
  open(tree + "/inner/kept-until-removed", OpenMode::kTruncate);
  ASSERT_EQ(::symlink(outside.c_str(), (tree + "/to-dir").c_str()), 0);
  ASSERT_EQ(::symlink((outside + "/notes.txt").c_str(), (tree + "/to-file").c_str()), 0);
  ASSERT_EQ(::symlink((tree + "/inner").c_str(), (tree + "/to-inner").c_str()), 0);
  ASSERT_EQ(::symlink((tree + "/absent").c_str(), (tree + "/dangling").c_str()), 0);
  EXPECT_TRUE(env_->is_symlink(tree + "/to-dir"));
  EXPECT_TRUE(env_->is_symlink(tree + "/dangling"));
  EXPECT_FALSE(env_->is_symlink(tree + "/inner"));
  EXPECT_FALSE(env_->is_symlink(dir_.file("absent")));

  ASSERT_TRUE(env_->remove_all(tree).ok());
  EXPECT_FALSE(env_->exists(tree));
  EXPECT_TRUE(env_->exists(outside + "/step-00000010/manifest.json"));
  EXPECT_TRUE(env_->exists(outside + "/notes.txt"));

  // A link given as the root is removed as a link too.
  const std::string link = dir_.file("link-root");
  ASSERT_EQ(::symlink(outside.c_str(), link.c_str()), 0);
  ASSERT_TRUE(env_->remove_all(link).ok());
  EXPECT_FALSE(env_->exists(link));
  EXPECT_TRUE(env_->exists(outside + "/step-00000010/manifest.json"));
}

INSTANTIATE_TEST_SUITE_P(Backends, EnvTest, ::testing::Values(IoBackend::kPosix, IoBackend::kUring),
                         [](const auto& info) { return testing::backend_label(info.param); });

TEST(IoBackendTest, ParsesTheEnvironmentVariableValues) {
  EXPECT_EQ(*parse_io_backend(""), IoBackend::kAuto);
  EXPECT_EQ(*parse_io_backend("auto"), IoBackend::kAuto);
  EXPECT_EQ(*parse_io_backend("posix"), IoBackend::kPosix);
  EXPECT_EQ(*parse_io_backend("uring"), IoBackend::kUring);
  Result<IoBackend> bad = parse_io_backend("aio");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("MS_IO_BACKEND"), std::string::npos);
}

TEST(IoBackendTest, AutoPicksOneOfTheTwoBackends) {
  Result<std::unique_ptr<Env>> env = new_posix_env(IoBackend::kAuto);
  ASSERT_TRUE(env.ok());
  std::string_view name = (*env)->backend_name();
  EXPECT_TRUE(name == "io_uring" || name == "pread/pwrite") << name;
}

// Sets an environment variable for one test and restores the previous value afterwards.
class ScopedEnvVar {
 public:
  ScopedEnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnvVar() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(IoBackendTest, EnvironmentVariableForcesThePosixBackend) {
  ScopedEnvVar var("MS_IO_BACKEND", "posix");
  EXPECT_EQ(new_env_from_environment()->backend_name(), "pread/pwrite");
}

TEST(IoBackendTest, EnvironmentVariableForcesUringOrFallsBack) {
  ScopedEnvVar var("MS_IO_BACKEND", "uring");
  std::string_view expected = new_posix_env(IoBackend::kUring).ok() ? "io_uring" : "pread/pwrite";
  EXPECT_EQ(new_env_from_environment()->backend_name(), expected);
}

TEST(IoBackendTest, UnknownEnvironmentValueStillGivesAWorkingEnv) {
  ScopedEnvVar var("MS_IO_BACKEND", "bogus");
  EXPECT_FALSE(new_env_from_environment()->backend_name().empty());
}

TEST(IoBackendTest, RingThatCannotBeSetUpIsUnavailableWithTheReason) {
  // A zero-entry ring is refused by every kernel, like a forbidden io_uring_setup is.
  Result<std::unique_ptr<UringQueue>> queue = UringQueue::create(0);
  EXPECT_EQ(queue.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(queue.status().message().find("io_uring_queue_init"), std::string::npos)
      << queue.status().message();
}

TEST(ParentDirTest, HandlesRelativeAbsoluteAndTrailingSlashes) {
  EXPECT_EQ(parent_dir("a/b/c"), "a/b");
  EXPECT_EQ(parent_dir("/x"), "/");
  EXPECT_EQ(parent_dir("file"), ".");
  EXPECT_EQ(parent_dir("a/b/"), "a");
}

}  // namespace
}  // namespace ms::io
