// Atomic commits: a target either keeps its old content or gets the whole new content, whatever
// fails on the way, and no temporary file is ever left behind.
#include "io/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <vector>

#include "io/fault_env.h"
#include "io/zstd_stream.h"
#include "tests/io/temp_dir.h"

namespace ms::io {
namespace {

using testing::TempDir;

class AtomicFileTest : public ::testing::Test {
 protected:
  // The directory's entries, to show that nothing besides the expected files exists.
  std::vector<std::string> entries() { return *default_env().list_dir(dir_.path()); }

  // Writes `target` with old content, runs a faulted atomic write of new content, and checks
  // that it failed, the old content survived and no temporary file is left.
  void expect_failed_write_keeps_old_content(const std::function<void()>& arm_fault) {
    std::string target = dir_.file("target");
    ASSERT_TRUE(write_file_atomic(target, "old content").ok());
    arm_fault();
    Status status = write_file_atomic(faulty_, target, std::string(10000, 'n'));
    EXPECT_EQ(status.code(), StatusCode::kIOError);
    EXPECT_NE(status.message().find(target), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("injected"), std::string::npos) << status.message();
    EXPECT_EQ(*read_file(target), "old content");
    EXPECT_EQ(entries(), std::vector<std::string>{"target"});
    EXPECT_EQ(faulty_.injected_faults(), 1);
  }

  TempDir dir_;
  FaultInjectingEnv faulty_{default_env()};
};

TEST_F(AtomicFileTest, WriteThenReadRoundTrips) {
  std::string path = dir_.file("f");
  ASSERT_TRUE(write_file_atomic(path, "first").ok());
  ASSERT_TRUE(write_file_atomic(path, "second, longer").ok());
  EXPECT_EQ(*read_file(path), "second, longer");
  EXPECT_EQ(entries(), std::vector<std::string>{"f"});
}

// The temporary is renamed over the target, which would replace a FIFO or a device (as root,
// `--output /dev/null --replace` replaced /dev/null): such a target is refused and left as it is.
TEST_F(AtomicFileTest, WriteOverAFifoIsRefusedAndLeavesIt) {
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Status st = write_file_atomic(fifo, "data");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("output '" + fifo + "' is a FIFO, not a regular file"), std::string::npos)
      << st.message();
  struct stat after {};
  ASSERT_EQ(::stat(fifo.c_str(), &after), 0);
  EXPECT_TRUE(S_ISFIFO(after.st_mode));
  EXPECT_EQ(entries(), std::vector<std::string>{"fifo"});
}

TEST_F(AtomicFileTest, ReadFileOfAnEndlessDeviceIsRefusedNamingIt) {
  const Result<std::string> endless = read_file("/dev/zero", kMaxConfigFileBytes, "config file");
  ASSERT_FALSE(endless.ok());
  EXPECT_EQ(endless.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(endless.status().message(),
            "config file '/dev/zero' is a character device, not a regular file");
}

TEST_F(AtomicFileTest, ReadFileOfAFifoWithoutWriterIsRefusedWithoutBlocking) {
  // Without a non-blocking open this test never returns: nobody opens the FIFO for writing.
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Result<std::string> read = read_file(fifo, kMaxConfigFileBytes, "cluster file");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(), "cluster file '" + fifo + "' is a FIFO, not a regular file");
}

TEST_F(AtomicFileTest, ReadFileOfADirectoryIsRefusedNamingIt) {
  const Result<std::string> read = read_file(dir_.path(), kMaxConfigFileBytes, "config file");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(),
            "config file '" + dir_.path() + "' is a directory, not a regular file");
}

TEST_F(AtomicFileTest, ReadFileAboveItsCapIsRefusedBeforeReadingNamingSizeAndCap) {
  // Sparse: a size far above any cap costs no disk, and the refusal must come from the size
  // alone (reading it would take minutes and gigabytes).
  const std::string path = dir_.file("huge.yaml");
  ASSERT_TRUE(write_file_atomic(path, "x").ok());
  ASSERT_EQ(::truncate(path.c_str(), off_t{1} << 40), 0);
  const Result<std::string> read = read_file(path, kMaxConfigFileBytes, "config file");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(read.status().message(), "config file '" + path +
                                         "' is 1099511627776 bytes, above the limit of "
                                         "16777216 bytes (16 MiB) for a config file");
}

TEST_F(AtomicFileTest, ReadFileAtItsCapReadsItAll) {
  const std::string path = dir_.file("exact");
  ASSERT_TRUE(write_file_atomic(path, std::string(4097, 'a')).ok());
  EXPECT_EQ(read_file(path, 4097, "file")->size(), 4097u);
  EXPECT_FALSE(read_file(path, 4096, "file").ok());
}

TEST_F(AtomicFileTest, ReadFileOfMissingFileIsNotFound) {
  EXPECT_EQ(read_file(dir_.file("missing")).status().code(), StatusCode::kNotFound);
}

TEST_F(AtomicFileTest, WriteIntoMissingDirectoryIsIOErrorNamingPath) {
  std::string path = dir_.file("no/such/dir/f");
  Status status = write_file_atomic(path, "x");
  EXPECT_EQ(status.code(), StatusCode::kIOError);
  EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
}

TEST_F(AtomicFileTest, TempNameIsASiblingWithPidAndRandomSuffix) {
  std::string a = temp_sibling_name("/d/f");
  EXPECT_EQ(a.rfind("/d/f.tmp." + std::to_string(::getpid()) + ".", 0), 0u) << a;
  EXPECT_NE(a, temp_sibling_name("/d/f"));
}

TEST_F(AtomicFileTest, WriterWithoutCommitLeavesNothing) {
  std::string path = dir_.file("never");
  {
    auto writer = std::move(AtomicFileWriter::create(path)).value();
    ASSERT_TRUE(writer->append("partial").ok());
    EXPECT_EQ(parent_dir(writer->temp_path()), dir_.path());
    EXPECT_TRUE(default_env().exists(writer->temp_path()));
  }
  EXPECT_TRUE(entries().empty());
}

TEST_F(AtomicFileTest, WriterCommitPublishesStreamedContent) {
  std::string path = dir_.file("streamed.zst");
  auto writer = std::move(AtomicFileWriter::create(path)).value();
  ZstdWriter zstd(writer->file());
  ASSERT_TRUE(zstd.write("compressed and committed").ok());
  ASSERT_TRUE(zstd.finish().ok());
  EXPECT_FALSE(default_env().exists(path)) << "nothing is visible before commit";
  ASSERT_TRUE(writer->commit().ok());
  EXPECT_EQ(*decompress(*read_file(path)), "compressed and committed");
  EXPECT_EQ(entries(), std::vector<std::string>{"streamed.zst"});
}

TEST_F(AtomicFileTest, AppendAndFileShareOneAppendOffset) {
  std::string path = dir_.file("mixed");
  auto writer = std::move(AtomicFileWriter::create(path)).value();
  ASSERT_TRUE(writer->append("header|").ok());
  ASSERT_TRUE(writer->file().append("body|").ok());
  ASSERT_TRUE(writer->append("footer").ok());
  ASSERT_TRUE(writer->commit().ok());
  EXPECT_EQ(*read_file(path), "header|body|footer");
}

TEST_F(AtomicFileTest, FailedWriteThroughFileKeepsCommitFromPublishing) {
  std::string path = dir_.file("streamed.zst");
  auto writer = std::move(AtomicFileWriter::create(faulty_, path)).value();
  ZstdWriter zstd(writer->file());
  ASSERT_TRUE(zstd.write("some data").ok());
  faulty_.fail_nth_write(1);
  EXPECT_FALSE(zstd.finish().ok());
  Status status = writer->commit();
  EXPECT_EQ(status.code(), StatusCode::kIOError);
  EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
  EXPECT_TRUE(entries().empty());
}

TEST_F(AtomicFileTest, FailedWriteKeepsOldContent) {
  expect_failed_write_keeps_old_content([&] { faulty_.fail_nth_write(1); });
}

TEST_F(AtomicFileTest, ShortWriteKeepsOldContent) {
  expect_failed_write_keeps_old_content([&] { faulty_.short_write_nth(1, 100); });
}

TEST_F(AtomicFileTest, DiskFullKeepsOldContent) {
  expect_failed_write_keeps_old_content([&] { faulty_.enospc_after(5000); });
}

TEST_F(AtomicFileTest, FsyncFailureKeepsOldContent) {
  expect_failed_write_keeps_old_content([&] { faulty_.fail_file_sync(true); });
}

TEST_F(AtomicFileTest, RenameFailureKeepsOldContent) {
  expect_failed_write_keeps_old_content([&] { faulty_.fail_rename(true); });
}

TEST_F(AtomicFileTest, WriterIsPoisonedAfterAFailedAppend) {
  std::string path = dir_.file("poisoned");
  auto writer = std::move(AtomicFileWriter::create(faulty_, path)).value();
  faulty_.fail_nth_write(2);
  ASSERT_TRUE(writer->append("one").ok());
  EXPECT_FALSE(writer->append("two").ok());
  EXPECT_FALSE(writer->append("three").ok());
  EXPECT_FALSE(writer->commit().ok());
  EXPECT_FALSE(default_env().exists(path));
  EXPECT_TRUE(entries().empty()) << "the temporary file is removed at the first failure";
}

TEST_F(AtomicFileTest, DirectorySyncFailureAfterRenameIsReported) {
  std::string path = dir_.file("late");
  faulty_.fail_dir_sync(true);
  Status status = write_file_atomic(faulty_, path, "new");
  EXPECT_EQ(status.code(), StatusCode::kIOError);
  EXPECT_NE(status.message().find("may not survive a crash"), std::string::npos);
  EXPECT_EQ(entries(), std::vector<std::string>{"late"});
}

class CommitDirectoryTest : public AtomicFileTest {
 protected:
  // Fills `dir` with a file and a nested file, as a checkpoint save would.
  void fill(const std::string& dir) {
    ASSERT_TRUE(default_env().create_dirs(dir + "/shards").ok());
    ASSERT_TRUE(write_file_atomic(dir + "/manifest.json", "{}").ok());
    ASSERT_TRUE(write_file_atomic(dir + "/shards/rank-0.bin", "data").ok());
  }
};

TEST_F(CommitDirectoryTest, RenamesAFullyWrittenDirectoryIntoPlace) {
  std::string tmp = dir_.file("step-1.tmp");
  std::string final_dir = dir_.file("step-1");
  fill(tmp);
  ASSERT_TRUE(commit_directory(tmp, final_dir).ok());
  EXPECT_FALSE(default_env().exists(tmp));
  EXPECT_EQ(*read_file(final_dir + "/shards/rank-0.bin"), "data");
  EXPECT_EQ(entries(), std::vector<std::string>{"step-1"});
}

TEST_F(CommitDirectoryTest, RefusesToOverwriteANonEmptyDirectory) {
  std::string tmp = dir_.file("new.tmp");
  std::string final_dir = dir_.file("existing");
  fill(tmp);
  fill(final_dir);
  Status status = commit_directory(tmp, final_dir);
  EXPECT_EQ(status.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(status.message().find(final_dir), std::string::npos);
  EXPECT_TRUE(default_env().exists(tmp));
}

TEST_F(CommitDirectoryTest, ReplacesAnEmptyDirectory) {
  std::string tmp = dir_.file("new.tmp");
  std::string final_dir = dir_.file("empty");
  fill(tmp);
  ASSERT_TRUE(default_env().create_dir(final_dir).ok());
  ASSERT_TRUE(commit_directory(tmp, final_dir).ok());
  EXPECT_EQ(*read_file(final_dir + "/manifest.json"), "{}");
}

TEST_F(CommitDirectoryTest, FailureBeforeRenameLeavesNoFinalDirectory) {
  for (auto arm : std::vector<std::function<void()>>{[&] { faulty_.fail_file_sync(true); },
                                                     [&] { faulty_.fail_dir_sync(true); },
                                                     [&] { faulty_.fail_rename(true); }}) {
    std::string tmp = dir_.file("step-2.tmp");
    std::string final_dir = dir_.file("step-2");
    fill(tmp);
    arm();
    Status status = commit_directory(faulty_, tmp, final_dir);
    EXPECT_EQ(status.code(), StatusCode::kIOError);
    EXPECT_NE(status.message().find(final_dir), std::string::npos) << status.message();
    EXPECT_FALSE(default_env().exists(final_dir));
    EXPECT_TRUE(default_env().exists(tmp + "/shards/rank-0.bin"));
    faulty_.clear_faults();
    ASSERT_TRUE(default_env().remove_all(tmp).ok());
  }
}

// The rename went through but the parent's fsync failed: the caller is told it failed, so the
// rename is taken back and `final_dir` does not exist.
TEST_F(CommitDirectoryTest, FailedFsyncAfterTheRenameTakesTheRenameBack) {
  std::string tmp = dir_.file("step-3.tmp");
  std::string final_dir = dir_.file("step-3");
  fill(tmp);
  faulty_.fail_nth_dir_sync_of(dir_.path(), 1);
  Status status = commit_directory(faulty_, tmp, final_dir);
  EXPECT_EQ(status.code(), StatusCode::kIOError);
  EXPECT_NE(status.message().find("fsync directory"), std::string::npos) << status.message();
  EXPECT_FALSE(default_env().exists(final_dir));
  EXPECT_EQ(*read_file(tmp + "/shards/rank-0.bin"), "data");
  EXPECT_EQ(faulty_.dir_syncs_of(dir_.path()), 1);
}

TEST_F(CommitDirectoryTest, MissingSourceIsNotFound) {
  EXPECT_EQ(commit_directory(dir_.file("nope"), dir_.file("x")).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ms::io
