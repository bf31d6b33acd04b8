// Each fault the FaultInjectingEnv offers, seen from a File user, and proof that a flipped byte
// on read is caught by comparing the data read with what was written.
#include "io/fault_env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "io/atomic_file.h"
#include "tests/io/temp_dir.h"

namespace ms::io {
namespace {

using testing::TempDir;

class FaultEnvTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    MS_IO_ENV_OR_SKIP(base_, GetParam());
    faulty_ = std::make_unique<FaultInjectingEnv>(*base_);
  }

  std::unique_ptr<File> open_new(const std::string& name) {
    return std::move(faulty_->open(dir_.file(name), OpenMode::kTruncate)).value();
  }
  std::string on_disk(const std::string& name) { return *read_file(*base_, dir_.file(name)); }

  std::unique_ptr<Env> base_;
  std::unique_ptr<FaultInjectingEnv> faulty_;
  TempDir dir_;
};

TEST_P(FaultEnvTest, PassesEverythingThroughWhenNoFaultIsSet) {
  auto file = open_new("clean");
  ASSERT_TRUE(file->append("abc").ok());
  ASSERT_TRUE(file->sync().ok());
  ASSERT_TRUE(file->close().ok());
  EXPECT_EQ(on_disk("clean"), "abc");
  EXPECT_EQ(faulty_->writes(), 1);
  EXPECT_EQ(faulty_->bytes_written(), 3u);
  EXPECT_EQ(faulty_->injected_faults(), 0);
  EXPECT_EQ(faulty_->backend_name(), base_->backend_name());
}

TEST_P(FaultEnvTest, NthWriteFailsWithEioAndWritesNothing) {
  auto file = open_new("nth");
  faulty_->fail_nth_write(3);
  EXPECT_TRUE(file->append("1").ok());
  EXPECT_TRUE(file->append("2").ok());
  Status third = file->append("3");
  EXPECT_EQ(third.code(), StatusCode::kIOError);
  EXPECT_NE(third.message().find(std::strerror(EIO)), std::string::npos) << third.message();
  EXPECT_NE(third.message().find(dir_.file("nth")), std::string::npos);
  EXPECT_TRUE(file->append("4").ok()) << "only the nth write fails";
  EXPECT_EQ(on_disk("nth"), "124");
}

TEST_P(FaultEnvTest, ShortWriteStoresAPrefixAndFails) {
  auto file = open_new("short");
  faulty_->short_write_nth(1, 4);
  Status status = file->append("abcdefgh");
  EXPECT_EQ(status.code(), StatusCode::kIOError);
  EXPECT_NE(status.message().find("short write"), std::string::npos) << status.message();
  EXPECT_EQ(on_disk("short"), "abcd");
  EXPECT_EQ(file->append_offset(), 0u) << "a failed append does not advance";
}

TEST_P(FaultEnvTest, DiskFillsAfterKBytes) {
  auto file = open_new("full");
  faulty_->enospc_after(10);
  EXPECT_TRUE(file->append("123456").ok());
  Status status = file->append("789abc");
  EXPECT_NE(status.message().find(std::strerror(ENOSPC)), std::string::npos) << status.message();
  EXPECT_FALSE(file->append("x").ok()) << "the disk stays full";
  EXPECT_EQ(on_disk("full"), "123456789a");
  faulty_->clear_faults();
  EXPECT_TRUE(file->write_at(10, "x").ok()) << "clearing faults frees the disk";
}

TEST_P(FaultEnvTest, FsyncFailsOnFilesAndDirectoriesSeparately) {
  auto file = open_new("sync");
  faulty_->fail_file_sync(true);
  EXPECT_EQ(file->sync().code(), StatusCode::kIOError);
  EXPECT_TRUE(faulty_->sync_dir(dir_.path()).ok());
  faulty_->fail_file_sync(false);
  faulty_->fail_dir_sync(true);
  EXPECT_TRUE(file->sync().ok());
  EXPECT_EQ(faulty_->sync_dir(dir_.path()).code(), StatusCode::kIOError);
}

TEST_P(FaultEnvTest, RenameFailsAndRenamesNothing) {
  open_new("from");
  faulty_->fail_rename(true);
  EXPECT_EQ(faulty_->rename(dir_.file("from"), dir_.file("to")).code(), StatusCode::kIOError);
  EXPECT_TRUE(base_->exists(dir_.file("from")));
  EXPECT_FALSE(base_->exists(dir_.file("to")));
}

TEST_P(FaultEnvTest, RenameOntoOnePathFailsAndOthersPass) {
  open_new("a");
  open_new("b");
  faulty_->fail_rename_onto(dir_.file("blocked"));
  EXPECT_EQ(faulty_->rename(dir_.file("a"), dir_.file("blocked")).code(), StatusCode::kIOError);
  EXPECT_TRUE(faulty_->rename(dir_.file("b"), dir_.file("free")).ok());
  EXPECT_TRUE(base_->exists(dir_.file("a")));
  EXPECT_TRUE(base_->exists(dir_.file("free")));
  EXPECT_EQ(faulty_->injected_faults(), 1);
}

TEST_P(FaultEnvTest, NthFsyncOfOneDirectoryFailsCountingFromNow) {
  const std::string other = dir_.file("sub");
  ASSERT_TRUE(base_->create_dir(other).ok());
  EXPECT_TRUE(faulty_->sync_dir(dir_.path()).ok());
  faulty_->fail_nth_dir_sync_of(dir_.path(), 2);  // the 3rd fsync of dir_ in all
  EXPECT_TRUE(faulty_->sync_dir(dir_.path()).ok());
  EXPECT_TRUE(faulty_->sync_dir(other).ok());
  EXPECT_EQ(faulty_->sync_dir(dir_.path()).code(), StatusCode::kIOError);
  EXPECT_TRUE(faulty_->sync_dir(dir_.path()).ok());
  EXPECT_EQ(faulty_->dir_syncs_of(dir_.path()), 4);
  EXPECT_EQ(faulty_->dir_syncs_of(other), 1);
}

TEST_P(FaultEnvTest, CorruptOnReadFlipsBitsOnlyInWhatIsRead) {
  std::string path = dir_.file("data");
  std::string written(1000, '\0');
  for (size_t i = 0; i < written.size(); ++i) written[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(write_file_atomic(*faulty_, path, written).ok());
  faulty_->corrupt_on_read(path, 500, 0x80);

  Result<std::string> read_back = read_file(*faulty_, path);
  ASSERT_TRUE(read_back.ok());
  ASSERT_EQ(read_back->size(), written.size());
  // A byte comparison (standing in for a checksum) catches the flip at exactly that byte.
  auto mismatch = std::mismatch(written.begin(), written.end(), read_back->begin());
  EXPECT_EQ(mismatch.first - written.begin(), 500);
  EXPECT_EQ(static_cast<uint8_t>(*mismatch.first ^ *mismatch.second), 0x80);
  EXPECT_EQ(std::string(mismatch.first + 1, written.end()),
            std::string(mismatch.second + 1, read_back->end()));
  EXPECT_EQ(*read_file(*base_, path), written) << "the file on disk is untouched";
}

TEST_P(FaultEnvTest, CorruptOnReadAppliesToBatchedReads) {
  std::string path = dir_.file("batched");
  ASSERT_TRUE(write_file_atomic(*faulty_, path, std::string(100, 'a')).ok());
  faulty_->corrupt_on_read(path, 42, 0x01);
  auto file = std::move(faulty_->open(path, OpenMode::kRead)).value();
  std::string first(40, '\0');
  std::string second(20, '\0');
  std::vector<ReadRange> ranges{{0, std::as_writable_bytes(std::span(first))},
                                {40, std::as_writable_bytes(std::span(second))}};
  ASSERT_TRUE(faulty_->read_ranges(*file, ranges).ok());
  EXPECT_EQ(first, std::string(40, 'a'));
  EXPECT_EQ(second, std::string(2, 'a') + "`" + std::string(17, 'a'));
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultEnvTest,
                         ::testing::Values(IoBackend::kPosix, IoBackend::kUring),
                         [](const auto& info) { return testing::backend_label(info.param); });

}  // namespace
}  // namespace ms::io
