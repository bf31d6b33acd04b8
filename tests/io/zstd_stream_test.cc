// Streaming and one-shot zstd: round trips in small pieces, and damaged or truncated input
// reported as Corruption naming the file and byte offset.
#include "io/zstd_stream.h"

#include <gtest/gtest.h>

#include <random>

#include "io/atomic_file.h"
#include "tests/io/temp_dir.h"

namespace ms::io {
namespace {

using testing::TempDir;

// Half random bytes, half repeated text: exercises both incompressible and compressible input.
std::string mixed_data(size_t n) {
  std::mt19937 gen(42);
  std::string s;
  s.reserve(n);
  while (s.size() < n) {
    if (gen() % 2 == 0) {
      for (int i = 0; i < 1000 && s.size() < n; ++i) s.push_back(static_cast<char>(gen()));
    } else {
      for (int i = 0; i < 40 && s.size() < n; ++i) s += "the quick brown fox ";
    }
  }
  s.resize(n);
  return s;
}

class ZstdStreamTest : public ::testing::Test {
 protected:
  // Compresses `data` into `path`, handing it to the writer `piece` bytes at a time.
  void write_compressed(const std::string& path, const std::string& data, size_t piece) {
    auto file = std::move(env().open(path, OpenMode::kTruncate)).value();
    ZstdWriter writer(*file);
    for (size_t pos = 0; pos < data.size(); pos += piece) {
      ASSERT_TRUE(writer.write(std::string_view(data).substr(pos, piece)).ok());
    }
    ASSERT_TRUE(writer.finish().ok());
    EXPECT_EQ(writer.bytes_in(), data.size());
    EXPECT_EQ(writer.bytes_out(), *file->size());
    ASSERT_TRUE(file->close().ok());
  }

  // Decompresses `path`, asking the reader for `piece` bytes at a time.
  Result<std::string> read_decompressed(const std::string& path, size_t piece) {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<File> file, env().open(path, OpenMode::kRead));
    ZstdReader reader(*file);
    std::string out;
    std::string buf(piece, '\0');
    for (;;) {
      MS_ASSIGN_OR_RETURN(size_t got, reader.read(std::as_writable_bytes(std::span(buf))));
      if (got == 0) return out;
      out.append(buf, 0, got);
    }
  }

  Env& env() { return default_env(); }
  TempDir dir_;
};

TEST_F(ZstdStreamTest, RoundTripsLargeDataInSmallPieces) {
  std::string data = mixed_data(3'000'000);
  std::string path = dir_.file("data.zst");
  write_compressed(path, data, 777);
  Result<std::string> back = read_decompressed(path, 1001);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(*back == data);
  EXPECT_LT(*env().open(path, OpenMode::kRead).value()->size(), data.size());
}

TEST_F(ZstdStreamTest, RoundTripsEmptyInputAndReadAll) {
  std::string path = dir_.file("empty.zst");
  write_compressed(path, "", 1);
  auto file = std::move(env().open(path, OpenMode::kRead)).value();
  ZstdReader reader(*file);
  Result<std::string> all = reader.read_all();
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_EQ(*all, "");
}

TEST_F(ZstdStreamTest, ReaderCanStartAtAnOffsetAfterAHeader) {
  std::string path = dir_.file("with_header");
  auto file = std::move(env().open(path, OpenMode::kTruncate)).value();
  ASSERT_TRUE(file->append("HEADER").ok());
  ZstdWriter writer(*file);
  ASSERT_TRUE(writer.write("payload after a header").ok());
  ASSERT_TRUE(writer.finish().ok());
  ZstdReader reader(*file, 6);
  EXPECT_EQ(*reader.read_all(), "payload after a header");
}

TEST_F(ZstdStreamTest, TruncatedStreamIsCorruptionNamingFileAndOffset) {
  std::string data = mixed_data(200'000);
  std::string path = dir_.file("cut.zst");
  write_compressed(path, data, 4096);
  std::string compressed = *read_file(path);
  size_t cut = compressed.size() / 2;
  ASSERT_TRUE(write_file_atomic(path, compressed.substr(0, cut)).ok());

  Result<std::string> back = read_decompressed(path, 4096);
  ASSERT_EQ(back.status().code(), StatusCode::kCorruption);
  EXPECT_NE(back.status().message().find(path), std::string::npos) << back.status().message();
  EXPECT_NE(back.status().message().find("byte " + std::to_string(cut)), std::string::npos)
      << back.status().message();
  EXPECT_NE(back.status().message().find("truncated"), std::string::npos);
}

TEST_F(ZstdStreamTest, FlippedByteIsCorruptionNamingTheFile) {
  std::string data = mixed_data(100'000);
  std::string path = dir_.file("flipped.zst");
  write_compressed(path, data, 4096);
  std::string compressed = *read_file(path);
  compressed[compressed.size() / 2] ^= 0x10;
  ASSERT_TRUE(write_file_atomic(path, compressed).ok());

  Result<std::string> back = read_decompressed(path, 4096);
  ASSERT_EQ(back.status().code(), StatusCode::kCorruption);
  EXPECT_NE(back.status().message().find(path), std::string::npos) << back.status().message();
  EXPECT_NE(back.status().message().find("at byte "), std::string::npos);
}

TEST_F(ZstdStreamTest, NonZstdAndEmptyFilesAreCorruption) {
  std::string text = dir_.file("plain.txt");
  ASSERT_TRUE(write_file_atomic(text, "this is not zstd").ok());
  EXPECT_EQ(read_decompressed(text, 64).status().code(), StatusCode::kCorruption);

  std::string empty = dir_.file("empty");
  ASSERT_TRUE(write_file_atomic(empty, "").ok());
  Result<std::string> back = read_decompressed(empty, 64);
  EXPECT_EQ(back.status().code(), StatusCode::kCorruption);
  EXPECT_NE(back.status().message().find("no zstd frame"), std::string::npos);
}

TEST_F(ZstdStreamTest, ReaderStaysFailedAfterCorruption) {
  std::string path = dir_.file("bad");
  ASSERT_TRUE(write_file_atomic(path, std::string(100, 'x')).ok());
  auto file = std::move(env().open(path, OpenMode::kRead)).value();
  ZstdReader reader(*file);
  std::string buf(10, '\0');
  EXPECT_EQ(reader.read(std::as_writable_bytes(std::span(buf))).status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(reader.read(std::as_writable_bytes(std::span(buf))).status().code(),
            StatusCode::kCorruption);
}

TEST(ZstdBufferTest, OneShotRoundTrip) {
  std::string data = mixed_data(500'000);
  std::string packed = compress(data);
  EXPECT_LT(packed.size(), data.size());
  Result<std::string> back = decompress(packed);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(*back == data);
  EXPECT_EQ(*decompress(compress("")), "");
}

TEST(ZstdBufferTest, OneShotDecodesStreamedFramesWithoutAContentSize) {
  TempDir dir;
  auto file = std::move(default_env().open(dir.file("s.zst"), OpenMode::kTruncate)).value();
  ZstdWriter writer(*file, 1);
  ASSERT_TRUE(writer.write("streamed ").ok());
  ASSERT_TRUE(writer.write("frame").ok());
  ASSERT_TRUE(writer.finish().ok());
  EXPECT_EQ(*decompress(*read_file(dir.file("s.zst"))), "streamed frame");
}

TEST(ZstdBufferTest, OneShotDamageIsCorruptionWithOffset) {
  std::string packed = compress(mixed_data(50'000));
  Result<std::string> cut = decompress(std::string_view(packed).substr(0, packed.size() - 10));
  EXPECT_EQ(cut.status().code(), StatusCode::kCorruption);
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status().message();

  std::string flipped = packed;
  flipped[flipped.size() / 3] ^= 0x55;
  EXPECT_EQ(decompress(flipped).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(decompress("").status().code(), StatusCode::kCorruption);
  EXPECT_EQ(decompress("garbage!").status().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace ms::io
