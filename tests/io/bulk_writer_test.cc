// BulkWriter: the bytes that reach the file are exactly the bytes appended, in any mix of aligned
// and unaligned, large and tiny, in-place and copied spans, with direct I/O and through the page
// cache, on a writer thread and inline, on both backends; direct I/O is used wherever the
// filesystem has it, aligned memory is written without a copy, copied bytes may change once
// appended, and injected disk faults surface as errors.
#include "io/bulk_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <random>
#include <tuple>

#include "io/fault_env.h"
#include "tests/io/temp_dir.h"

namespace ms::io {
namespace {

using testing::TempDir;

constexpr uint64_t kPiece = 64 << 10;

// Whether `dir`'s filesystem accepts O_DIRECT, asked of the kernel directly.
bool filesystem_has_direct_io(const std::string& dir) {
  const std::string probe = dir + "/probe";
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const int flags = ::fcntl(fd, F_GETFL);
  const bool ok = ::fcntl(fd, F_SETFL, flags | O_DIRECT) == 0;
  ::close(fd);
  ::unlink(probe.c_str());
  return ok;
}

Buffer random_buffer(size_t n, uint32_t seed) {
  Buffer b(n, kDirectIoAlignment);
  std::mt19937 gen(seed);
  for (std::byte& c : b.bytes()) c = static_cast<std::byte>(gen());
  return b;
}

std::string read_whole(Env& env, const std::string& path) {
  Result<std::unique_ptr<File>> file = env.open(path, OpenMode::kRead);
  EXPECT_TRUE(file.ok()) << file.status().to_string();
  std::string back(*(*file)->size(), '\0');
  EXPECT_EQ(*(*file)->read_at(0, std::as_writable_bytes(std::span(back))), back.size());
  return back;
}

class BulkWriterTest : public ::testing::TestWithParam<std::tuple<IoBackend, bool, int>> {
 protected:
  void SetUp() override { MS_IO_ENV_OR_SKIP(env_, std::get<0>(GetParam())); }
  bool want_direct() const { return std::get<1>(GetParam()); }
  BulkWriter::Options options() const {
    BulkWriter::Options o;
    o.direct = want_direct();
    o.queue_depth = std::get<2>(GetParam());
    return o;
  }

  std::unique_ptr<Env> env_;
  TempDir dir_;
};

TEST_P(BulkWriterTest, TheFileHoldsExactlyTheBytesAppended) {
  // One source buffer, cut into spans that exercise every path: aligned and long (written in
  // place, several pieces), an unaligned tail of it, an unaligned start, tiny spans, an aligned
  // span arriving while bytes wait in the bounce buffer, a piece-sized unaligned run, and
  // copied spans (from a scratch buffer overwritten after each append) between them.
  const Buffer source = random_buffer(1 << 20, 7);
  const std::byte* s = static_cast<const std::byte*>(source.data());
  struct Span {
    size_t at, n;
    bool copy;
  };
  const std::vector<Span> spans = {
      {0, 3 * kPiece + 8192 + 123, false}, {300001, 70001, false}, {400000, 1, false},
      {400001, 2, true},  {400003, 3, false}, {4096 * 120, 5 * 4096, false},
      {500000, 2 * kPiece + 9, true},      {600001, kPiece, false}, {4096 * 200, 8192, false},
      {700000, 4096, true}};
  std::string expected;
  const std::string path = dir_.file("data");
  auto file = std::move(env_->open(path, OpenMode::kCreateNew)).value();
  BulkWriter::Options o = options();
  o.piece_bytes = kPiece + 100;  // rounded down to whole blocks
  std::atomic<uint64_t> reported{0};
  o.after_piece = [&](uint64_t n) {
    EXPECT_LE(n, kPiece);
    reported += n;
  };
  Result<std::unique_ptr<BulkWriter>> started = BulkWriter::start(*file, o);
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  BulkWriter& writer = **started;
  if (!want_direct()) {
    EXPECT_FALSE(writer.direct());
  }
  std::vector<std::byte> scratch;
  for (const Span& span : spans) {
    ASSERT_EQ(writer.offset(), expected.size());
    if (span.copy) {
      scratch.assign(s + span.at, s + span.at + span.n);
      ASSERT_TRUE(writer.append_copy(scratch).ok());
      std::fill(scratch.begin(), scratch.end(), std::byte{0x5a});  // too late to matter
    } else {
      ASSERT_TRUE(writer.append(std::span(s + span.at, span.n)).ok());
    }
    expected.append(reinterpret_cast<const char*>(s + span.at), span.n);
  }
  ASSERT_TRUE(writer.finish().ok());
  EXPECT_EQ(writer.offset(), expected.size());
  ASSERT_TRUE(file->sync().ok());
  ASSERT_TRUE(file->close().ok());
  // Direct writes pad the last block; the padding is written, reported and cut off again.
  EXPECT_GE(reported, expected.size());
  EXPECT_LT(reported, expected.size() + kDirectIoAlignment);
  const std::string back = read_whole(*env_, path);
  ASSERT_EQ(back.size(), expected.size());
  EXPECT_TRUE(back == expected) << "the file differs from the bytes appended";
}

TEST_P(BulkWriterTest, DirectWhereverTheFilesystemHasIt) {
  auto file = std::move(env_->open(dir_.file("data"), OpenMode::kCreateNew)).value();
  Result<std::unique_ptr<BulkWriter>> writer = BulkWriter::start(*file, options());
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  EXPECT_EQ((*writer)->direct(), want_direct() && filesystem_has_direct_io(dir_.path()));
}

TEST_P(BulkWriterTest, AnEmptyStreamLeavesAnEmptyFile) {
  const std::string path = dir_.file("empty");
  auto file = std::move(env_->open(path, OpenMode::kCreateNew)).value();
  std::unique_ptr<BulkWriter> writer = std::move(BulkWriter::start(*file, options())).value();
  ASSERT_TRUE(writer->finish().ok());
  ASSERT_TRUE(file->close().ok());
  EXPECT_EQ(read_whole(*env_, path), "");
}

INSTANTIATE_TEST_SUITE_P(
    Modes, BulkWriterTest,
    ::testing::Combine(::testing::Values(IoBackend::kPosix, IoBackend::kUring),
                       ::testing::Bool(), ::testing::Values(0, 2)),
    [](const auto& info) {
      return testing::backend_label(std::get<0>(info.param)) +
             (std::get<1>(info.param) ? "_direct" : "_page_cache") +
             (std::get<2>(info.param) ? "_thread" : "_inline");
    });

// A fresh data file opened through a FaultInjectingEnv, which counts (and can fail) its writes.
struct CountedFile {
  TempDir dir;
  FaultInjectingEnv env{default_env()};
  std::unique_ptr<File> file = std::move(env.open(dir.file("data"), OpenMode::kCreateNew)).value();
};

BulkWriter::Options in_pieces_of(uint64_t bytes) {
  BulkWriter::Options options;
  options.piece_bytes = bytes;
  return options;
}

// Direct writes from aligned memory go out in place, piece by piece, and only the unaligned tail
// passes through the bounce buffer: the writes a FaultInjectingEnv counts show it.
TEST(BulkWriterDirectTest, AlignedMemoryIsWrittenInPlace) {
  CountedFile out;
  if (!filesystem_has_direct_io(out.dir.path())) {
    GTEST_SKIP() << "no direct I/O on " << out.dir.path();
  }
  FaultInjectingEnv& env = out.env;
  const Buffer source = random_buffer(4 * kPiece, 3);
  std::unique_ptr<BulkWriter> writer =
      std::move(BulkWriter::start(*out.file, in_pieces_of(kPiece))).value();
  ASSERT_TRUE(writer->direct());
  const int before = env.writes();
  // 3.5 pieces and 100 bytes: three whole pieces and the half piece in place, then one padded
  // block from the bounce buffer.
  const size_t n = 3 * kPiece + kPiece / 2 + 100;
  ASSERT_TRUE(writer->append(source.bytes().first(n)).ok());
  ASSERT_TRUE(writer->finish().ok());
  EXPECT_EQ(env.writes() - before, 5);
  EXPECT_EQ(env.bytes_written(), n - 100 + kDirectIoAlignment);
  ASSERT_TRUE(out.file->close().ok());
  EXPECT_EQ(*std::move(env.open(out.dir.file("data"), OpenMode::kRead)).value()->size(), n);
}

class BulkWriterFaultTest : public ::testing::TestWithParam<std::tuple<bool, int>> {};

// A failing, torn or full disk fails the append that reaches it, with the injected error (not
// EINVAL from a direct write cut short at an unaligned byte).
TEST_P(BulkWriterFaultTest, DiskFaultsFailTheAppend) {
  for (int fault = 0; fault < 3; ++fault) {
    CountedFile out;
    FaultInjectingEnv& env = out.env;
    const Buffer source = random_buffer(4 * kPiece, 5);
    BulkWriter::Options options = in_pieces_of(kPiece);
    options.direct = std::get<0>(GetParam());
    options.queue_depth = std::get<1>(GetParam());
    std::unique_ptr<BulkWriter> writer = std::move(BulkWriter::start(*out.file, options)).value();
    if (fault == 0) env.fail_nth_write(2);
    if (fault == 1) env.short_write_nth(2, 1000);
    if (fault == 2) env.enospc_after(kPiece + 5000);
    // Copied and in place; with a writer thread the error may show only at finish().
    Status status = writer->append_copy(source.bytes().subspan(1, kPiece + 7));
    if (status.ok()) status = writer->append(source.bytes().subspan(kPiece + 8, 2 * kPiece));
    if (status.ok()) status = writer->finish();
    ASSERT_FALSE(status.ok()) << "fault " << fault;
    EXPECT_NE(status.message().find("injected fault"), std::string::npos) << status.message();
    EXPECT_EQ(env.injected_faults(), 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, BulkWriterFaultTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(0, 2)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "direct" : "page_cache") +
                                  (std::get<1>(info.param) ? "_thread" : "_inline");
                         });

// A writer dropped before finish() (its caller failed elsewhere) stops at once: the pieces still
// queued are not written, so their memory may go with the caller.
TEST(BulkWriterThreadTest, AnAbandonedWriterWritesNoMore) {
  CountedFile out;
  const Buffer source = random_buffer(8 * kPiece, 9);
  BulkWriter::Options options = in_pieces_of(kPiece);
  std::atomic<bool> written{false}, release{false};
  options.after_piece = [&](uint64_t) {
    written = true;
    while (!release.load()) std::this_thread::yield();  // the first write holds the thread
  };
  auto writer = std::move(BulkWriter::start(*out.file, options)).value();
  ASSERT_TRUE(writer->append(source.bytes()).ok());  // 8 pieces queued in place
  while (!written.load()) std::this_thread::yield();
  std::thread drop([&] { writer.reset(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  release = true;
  drop.join();
  EXPECT_EQ(out.env.writes(), 1);
}

// sync_every_bytes fsyncs as the pieces go out, not only at the end: with fsync failing, the
// write stops at the first staged sync (after two pieces), with the injected error; without the
// option the writer never syncs and all eight pieces go out. The bytes are unchanged.
TEST(BulkWriterSyncTest, SyncsInStagesAndAFailedSyncFailsTheWrite) {
  const Buffer source = random_buffer(8 * kPiece, 13);
  for (int queue_depth : {0, 2}) {
    BulkWriter::Options options = in_pieces_of(kPiece);
    options.queue_depth = queue_depth;
    options.sync_every_bytes = 2 * kPiece;
    CountedFile out;
    auto writer = std::move(BulkWriter::start(*out.file, options)).value();
    ASSERT_TRUE(writer->append(source.bytes()).ok());
    ASSERT_TRUE(writer->finish().ok()) << "queue depth " << queue_depth;
    EXPECT_EQ(read_whole(out.env, out.dir.file("data")),
              std::string(reinterpret_cast<const char*>(source.data()), source.size()));

    for (const uint64_t every : {uint64_t{0}, 2 * kPiece}) {
      options.sync_every_bytes = every;
      CountedFile failing;
      failing.env.fail_file_sync(true);
      auto doomed = std::move(BulkWriter::start(*failing.file, options)).value();
      Status status = doomed->append(source.bytes());
      if (status.ok()) status = doomed->finish();
      if (every == 0) {
        EXPECT_TRUE(status.ok()) << status.to_string();
        EXPECT_EQ(failing.env.writes(), 8) << "queue depth " << queue_depth;
        continue;
      }
      ASSERT_FALSE(status.ok()) << "queue depth " << queue_depth;
      EXPECT_NE(status.message().find("injected fault"), std::string::npos) << status.message();
      EXPECT_EQ(failing.env.writes(), 2) << "queue depth " << queue_depth;
    }
  }
}

// on_writer_start runs once, on the thread that writes the pieces, before the first write.
TEST(BulkWriterThreadTest, TheStartHookRunsOnTheWritingThreadFirst) {
  CountedFile out;
  const Buffer source = random_buffer(4 * kPiece, 11);
  BulkWriter::Options options = in_pieces_of(kPiece);
  std::atomic<int> starts{0}, writes_at_start{-1};
  std::thread::id hook_thread, write_thread;
  options.on_writer_start = [&] {
    hook_thread = std::this_thread::get_id();
    writes_at_start = out.env.writes();
    ++starts;
  };
  options.after_piece = [&](uint64_t) { write_thread = std::this_thread::get_id(); };
  const int writes_before = out.env.writes();
  auto writer = std::move(BulkWriter::start(*out.file, options)).value();
  ASSERT_TRUE(writer->append(source.bytes()).ok());
  ASSERT_TRUE(writer->finish().ok());
  EXPECT_EQ(starts.load(), 1);
  EXPECT_EQ(writes_at_start.load(), writes_before);
  EXPECT_EQ(hook_thread, write_thread);
  EXPECT_NE(hook_thread, std::this_thread::get_id());
}

}  // namespace
}  // namespace ms::io
