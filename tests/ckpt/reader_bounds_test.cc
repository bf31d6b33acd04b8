// What the checkpoint readers do with step directories crafted to fool them: zstd shards that
// claim or yield more or fewer bytes than their box (a decompression bomb stops at the box's
// size), data files shorter than the manifest says (refused before anything is allocated for
// them), and manifests whose shards overlap, refused by every reader that opens a checkpoint.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/diff.h"
#include "ckpt/manifest.h"
#include "ckpt/verify.h"
#include "core/crc32c.h"
#include "io/atomic_file.h"
#include "io/zstd_stream.h"

namespace ms::ckpt {
namespace {

namespace fs = std::filesystem;

// 12 f32 values 0..11: the raw bytes of a [4, 3] tensor.
std::string raw_values() {
  std::string bytes(48, '\0');
  for (int i = 0; i < 12; ++i) {
    const float v = static_cast<float>(i);
    std::memcpy(bytes.data() + 4 * i, &v, 4);
  }
  return bytes;
}

class ReaderBoundsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() /
             ("ms-reader-bounds-" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(root_);
    fs::create_directories(step_dir());
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string step_dir() const { return root_ + "/step-00000001"; }

  // A step directory holding tensor "w" (f32 [4, 3]) as one shard of `stored` bytes in
  // rank-00000.data, with the crc32c of those bytes; returns the manifest it wrote.
  Manifest write_step(const std::string& stored, const std::string& codec,
                      std::vector<ShardRecord> extra = {}) {
    EXPECT_TRUE(io::write_file_atomic(step_dir() + "/rank-00000.data", stored).ok());
    Manifest m;
    m.step = 1;
    TensorRecord t{"w", DType::kF32, {4, 3}, {}};
    t.shards.push_back({"rank-00000.data", 0, stored.size(), {0, 0}, {4, 3}, codec,
                        crc32c(stored.data(), stored.size())});
    for (ShardRecord& s : extra) t.shards.push_back(std::move(s));
    m.tensors.push_back(std::move(t));
    EXPECT_TRUE(io::write_file_atomic(step_dir() + "/manifest.json", m.to_json().dump()).ok());
    return m;
  }

  // read_region of the whole tensor through a freshly read manifest.
  Status read_all(std::vector<float>& out) {
    Result<Manifest> m = Manifest::read(step_dir());
    if (!m.ok()) return m.status();
    out.assign(12, -1.0f);
    const std::vector<int64_t> zeros = {0, 0}, shape = {4, 3};
    return read_region(step_dir(), *m, "w", zeros, shape, out.data());
  }

  std::string root_;
};

bool has(const Status& s, const std::string& part) {
  return s.message().find(part) != std::string::npos;
}

TEST_F(ReaderBoundsTest, AZstdShardOfExactlyTheBoxReadsBack) {
  write_step(io::compress(raw_values()), "zstd");
  std::vector<float> out;
  ASSERT_TRUE(read_all(out).ok());
  EXPECT_EQ(out[11], 11.0f);
}

// A frame claiming 100x the box is refused from its header, before decoding anything.
TEST_F(ReaderBoundsTest, AFrameClaimingMoreThanTheBoxIsCorruption) {
  write_step(io::compress(std::string(4800, 'x')), "zstd");
  std::vector<float> out;
  const Status s = read_all(out);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_TRUE(has(s, "tensor \"w\" shard at byte offset 0")) << s.message();
  EXPECT_TRUE(has(s, step_dir() + "/rank-00000.data")) << s.message();
  EXPECT_TRUE(has(s, "claims 4800 bytes, more than the 48 expected")) << s.message();
}

// A streamed frame records no content size; decoding stops at the box's end and the rest is
// reported, so a bomb costs the box's bytes, not the frame's.
TEST_F(ReaderBoundsTest, AStreamedBombStopsAtTheBoxSize) {
  const std::string path = step_dir() + "/bomb.zst";
  {
    std::unique_ptr<io::File> file = io::default_env().open(path, io::OpenMode::kTruncate).value();
    io::ZstdWriter writer(*file);
    const std::string zeros(1 << 20, '\0');
    for (int i = 0; i < 64; ++i) ASSERT_TRUE(writer.write(zeros).ok());  // 64 MiB of zeros
    ASSERT_TRUE(writer.finish().ok());
    ASSERT_TRUE(file->close().ok());
  }
  const std::string bomb = io::read_file(path).value();
  ASSERT_LT(bomb.size(), 64u << 10);
  write_step(bomb, "zstd");
  std::vector<float> out;
  const Status s = read_all(out);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_TRUE(has(s, "decompresses to more than the 48 bytes expected")) << s.message();
}

TEST_F(ReaderBoundsTest, AShortOrTruncatedFrameIsCorruption) {
  write_step(io::compress(raw_values().substr(0, 24)), "zstd");
  std::vector<float> out;
  Status s = read_all(out);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_TRUE(has(s, "decompresses to 24 bytes, 48 expected (truncated)")) << s.message();

  std::string cut = io::compress(raw_values());
  cut.resize(cut.size() - 6);
  write_step(cut, "zstd");
  s = read_all(out);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_TRUE(has(s, "tensor \"w\"")) << s.message();
}

// The manifest says 48 bytes; the file holds 10. Refused naming the file and the tensor, by
// the loader and by the check callers run before allocating a tensor from the manifest.
TEST_F(ReaderBoundsTest, ADataFileShorterThanTheManifestIsRefusedBeforeAllocating) {
  const Manifest m = write_step(raw_values(), "raw");
  ASSERT_TRUE(io::write_file_atomic(step_dir() + "/rank-00000.data", "0123456789").ok());
  std::vector<float> out;
  Status s = read_all(out);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_TRUE(has(s, "rank-00000.data: tensor \"w\"")) << s.message();
  EXPECT_TRUE(has(s, "the file has only 10 bytes")) << s.message();
  s = check_tensor_files(step_dir(), m.tensors[0], io::default_env());
  EXPECT_TRUE(has(s, "the file has only 10 bytes")) << s.message();
}

// A tensor of 2^40 bytes whose one shard the manifest places in a 48-byte file: diff and
// export read it through the catalog, which checks the file before sizing a buffer by it.
TEST_F(ReaderBoundsTest, ACatalogReadChecksTheFilesBeforeAllocatingTheTensor) {
  write_step(raw_values(), "raw");
  Manifest m = Manifest::read(step_dir()).value();
  m.tensors[0].global_shape = {int64_t{1} << 38};
  m.tensors[0].shards[0].global_offsets = {0};
  m.tensors[0].shards[0].lengths = {int64_t{1} << 38};
  m.tensors[0].shards[0].length = uint64_t{1} << 40;
  ASSERT_TRUE(io::write_file_atomic(step_dir() + "/manifest.json", m.to_json().dump()).ok());
  Result<OpenedCatalog> opened = open_tensor_catalog(step_dir(), io::default_env());
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  Result<Tensor> t = opened->catalog.read("w");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kCorruption);
  EXPECT_TRUE(has(t.status(), "the file has only 48 bytes")) << t.status().message();
}

// Two copies of the same half of "w": verify, diff/export (the catalog) and load all refuse
// the checkpoint naming the tensor and both boxes.
TEST_F(ReaderBoundsTest, EveryReaderRefusesOverlappingShards) {
  const std::string half = raw_values().substr(0, 24);
  ASSERT_TRUE(io::write_file_atomic(step_dir() + "/rank-00000.data", half).ok());
  Manifest m;
  m.step = 1;
  TensorRecord t{"w", DType::kF32, {4, 3}, {}};
  const uint32_t crc = crc32c(half.data(), half.size());
  t.shards.push_back({"rank-00000.data", 0, 24, {0, 0}, {2, 3}, "raw", crc});
  t.shards.push_back({"rank-00000.data", 0, 24, {0, 0}, {2, 3}, "raw", crc});
  m.tensors.push_back(std::move(t));
  ASSERT_TRUE(io::write_file_atomic(step_dir() + "/manifest.json", m.to_json().dump()).ok());
  const std::string want = "tensor \"w\" of shape [4, 3]: shards overlap: shard [0:2, 0:3] "
                           "(rank-00000.data offset 0) and shard [0:2, 0:3]";
  Result<VerifyReport> verified = verify_checkpoint(step_dir(), io::default_env());
  ASSERT_FALSE(verified.ok());
  EXPECT_TRUE(has(verified.status(), want)) << verified.status().message();
  Result<OpenedCatalog> catalog = open_tensor_catalog(step_dir(), io::default_env());
  ASSERT_FALSE(catalog.ok());
  EXPECT_TRUE(has(catalog.status(), want)) << catalog.status().message();
  std::vector<float> out;
  const Status loaded = read_all(out);
  EXPECT_TRUE(has(loaded, want)) << loaded.message();
  EXPECT_TRUE(has(loaded, step_dir() + "/manifest.json")) << loaded.message();
}

}  // namespace
}  // namespace ms::ckpt
