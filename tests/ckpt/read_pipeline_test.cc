// The chunked read-ahead loader (lib/ckpt/read_pipeline.h) on a step directory written by
// hand: shards at unaligned offsets in two files, a column split, a zstd shard and a 0-d
// tensor. Every chunk size, ring size and I/O mode reads the same values; each overlapping
// shard is read once however many regions it feeds; and a corrupt byte, a failed read, a
// short file or a missing one stops the load with an error naming it instead of hanging the
// reader thread.
#include "ckpt/read_pipeline.h"

#include <gtest/gtest.h>


#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/crc32c.h"
#include "io/atomic_file.h"
#include "io/fault_env.h"
#include "io/zstd_stream.h"
#include "tests/io/temp_dir.h"

namespace ms::ckpt {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kRows = 37, kCols = 29;  // tensor "w", f32
constexpr int64_t kZRows = 20, kZCols = 8;  // tensor "z", f32, stored compressed

float w_value(int64_t i, int64_t j) { return static_cast<float>(i * 1000 + j); }
float z_value(int64_t i, int64_t j) { return -static_cast<float>(i * 100 + j); }

// The row-major bytes of box [r0, r1) x [c0, c1) of a tensor whose element (i, j) is value(i, j).
template <class F>
std::string box_bytes(F value, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  std::string out;
  for (int64_t i = r0; i < r1; ++i) {
    for (int64_t j = c0; j < c1; ++j) {
      const float v = value(i, j);
      out.append(reinterpret_cast<const char*>(&v), 4);
    }
  }
  return out;
}

bool has(const Status& s, const std::string& part) {
  return s.message().find(part) != std::string::npos;
}

class ReadPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(step_dir());
    write_step();
  }
  std::string step_dir() const { return dir_.file("step-00000001"); }

  // Appends `bytes` to `file` as a shard of `t` covering `box`, after `gap` bytes of padding.
  void add_shard(std::string& file, const std::string& name, TensorRecord& t,
                 std::vector<int64_t> offsets, std::vector<int64_t> lengths,
                 const std::string& bytes, const std::string& codec, size_t gap) {
    file.append(gap, '\x55');
    t.shards.push_back({name, file.size(), bytes.size(), std::move(offsets), std::move(lengths),
                        codec, crc32c(bytes.data(), bytes.size())});
    file += bytes;
  }

  void write_step() {
    TensorRecord w{"w", DType::kF32, {kRows, kCols}, {}};
    TensorRecord z{"z", DType::kF32, {kZRows, kZCols}, {}};
    TensorRecord s{"s", DType::kI64, {}, {}};
    std::string a, b;
    add_shard(a, "rank-00000.data", w, {0, 0}, {11, kCols}, box_bytes(w_value, 0, 11, 0, kCols),
              "raw", 100);
    add_shard(b, "rank-00001.data", w, {11, 0}, {kRows - 11, 14},
              box_bytes(w_value, 11, kRows, 0, 14), "raw", 0);
    add_shard(a, "rank-00000.data", w, {11, 14}, {kRows - 11, kCols - 14},
              box_bytes(w_value, 11, kRows, 14, kCols), "raw", 7);
    add_shard(b, "rank-00001.data", z, {0, 0}, {kZRows, kZCols},
              io::compress(box_bytes(z_value, 0, kZRows, 0, kZCols)), "zstd", 3);
    const int64_t counter = 4242;
    add_shard(a, "rank-00000.data", s, {}, {},
              std::string(reinterpret_cast<const char*>(&counter), 8), "raw", 1);
    // Past the last shard, so a direct read of the last block has bytes after it.
    a.append(5000, '\x66');
    ASSERT_TRUE(io::write_file_atomic(step_dir() + "/rank-00000.data", a).ok());
    ASSERT_TRUE(io::write_file_atomic(step_dir() + "/rank-00001.data", b).ok());
    Manifest m;
    m.step = 1;
    m.tensors = {s, w, z};
    ASSERT_TRUE(io::write_file_atomic(step_dir() + "/manifest.json", m.to_json().dump()).ok());
    Result<Manifest> read = Manifest::read(step_dir());
    ASSERT_TRUE(read.ok()) << read.status().to_string();
    manifest_ = std::move(*read);
  }

  // Targets: all of w, the sub-box [5:30, 3:20] of w, all of z and s.
  struct Outputs {
    std::vector<float> w = std::vector<float>(kRows * kCols, -1.0f);
    std::vector<float> sub = std::vector<float>(25 * 17, -1.0f);
    std::vector<float> z = std::vector<float>(kZRows * kZCols, -1.0f);
    int64_t s = -1;
  };
  std::vector<ReadTarget> targets(Outputs& out) const {
    auto bytes = [](auto& v) { return std::as_writable_bytes(std::span(v)); };
    return {{manifest_.find("w"), Box{{0, 0}, {kRows, kCols}}, bytes(out.w)},
            {manifest_.find("w"), Box{{5, 3}, {25, 17}}, bytes(out.sub)},
            {manifest_.find("z"), Box{{0, 0}, {kZRows, kZCols}}, bytes(out.z)},
            {manifest_.find("s"), Box{{}, {}}, std::as_writable_bytes(std::span(&out.s, 1))}};
  }
  static void expect_values(const Outputs& out) {
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < kCols; ++j) ASSERT_EQ(out.w[i * kCols + j], w_value(i, j));
    }
    for (int64_t i = 0; i < 25; ++i) {
      for (int64_t j = 0; j < 17; ++j) ASSERT_EQ(out.sub[i * 17 + j], w_value(5 + i, 3 + j));
    }
    for (int64_t i = 0; i < kZRows; ++i) {
      for (int64_t j = 0; j < kZCols; ++j) ASSERT_EQ(out.z[i * kZCols + j], z_value(i, j));
    }
    EXPECT_EQ(out.s, 4242);
  }

  io::testing::TempDir dir_;
  Manifest manifest_;
};

TEST_F(ReadPipelineTest, EveryChunkSizeRingSizeAndIoModeReadsTheSameValues) {
  // One row per chunk, three rows, part of a row (still one row), everything at once.
  for (uint64_t chunk : {uint64_t{1}, uint64_t{3 * 14 * 4}, uint64_t{50}, uint64_t{1} << 20}) {
    for (int buffers : {1, 2, 3}) {
      for (bool direct : {false, true}) {
        SCOPED_TRACE("chunk " + std::to_string(chunk) + " buffers " + std::to_string(buffers) +
                     " direct " + std::to_string(direct));
        Outputs out;
        const Status st = read_targets(step_dir(), targets(out), io::default_env(),
                                       {.direct_io = direct, .chunk_bytes = chunk,
                                        .buffers = buffers});
        ASSERT_TRUE(st.ok()) << st.to_string();
        expect_values(out);
      }
    }
  }
}

// Two targets overlap the same shards of w: each shard is still read once (4 raw shards and the
// zstd one, one read each, with chunks larger than any shard).
TEST_F(ReadPipelineTest, EachShardIsReadOnceHoweverManyRegionsItFeeds) {
  io::FaultInjectingEnv counting(io::default_env());
  Outputs out;
  ASSERT_TRUE(read_targets(step_dir(), targets(out), counting).ok());
  expect_values(out);
  EXPECT_EQ(counting.reads(), 5);
}

// load_tensors goes through the same pipeline: resharded boxes of a local buffer.
TEST_F(ReadPipelineTest, LoadTensorsFillsAFlatRangeAcrossShards) {
  // Elements [100, 700) of w, flattened: partial rows, whole rows, a partial row.
  std::vector<float> range(600, -1.0f);
  Result<comm::ShardSpec> spec = comm::ShardSpec::flat_range({kRows, kCols}, 100, 700);
  ASSERT_TRUE(spec.ok());
  const LoadTensor want{"w", DType::kF32, *spec, range.data()};
  for (bool direct : {false, true}) {
    LoadOptions options;
    options.direct_io = direct;
    ASSERT_TRUE(load_tensors(step_dir(), manifest_, std::span(&want, 1), options,
                             io::default_env())
                    .ok());
    for (int64_t k = 0; k < 600; ++k) {
      ASSERT_EQ(range[k], w_value((100 + k) / kCols, (100 + k) % kCols)) << k;
    }
  }
}

TEST_F(ReadPipelineTest, ACorruptByteInAMiddleChunkIsRefusedNamingTheShard) {
  const ShardRecord& shard = manifest_.find("w")->shards.front();  // rows 0-10, offset 100
  io::FaultInjectingEnv flipping(io::default_env());
  flipping.corrupt_on_read(step_dir() + "/" + shard.file, shard.offset + 5 * kCols * 4 + 2);
  for (bool direct : {false, true}) {
    Outputs out;
    const Status st = read_targets(step_dir(), targets(out), flipping,
                                   {.direct_io = direct, .chunk_bytes = 2 * kCols * 4});
    ASSERT_EQ(st.code(), StatusCode::kCorruption) << st.to_string();
    EXPECT_TRUE(has(st, step_dir() + "/" + shard.file)) << st.message();
    EXPECT_TRUE(has(st, "tensor \"w\" shard at byte offset 100")) << st.message();
    EXPECT_TRUE(has(st, "crc32c mismatch")) << st.message();
  }
}

// Whichever read fails (the first, one in the middle with the ring full, the last), the load
// returns that error, naming the file, and the reader thread stops.
TEST_F(ReadPipelineTest, AFailedReadStopsTheLoadWithTheDiskError) {
  int total = 0;
  {
    io::FaultInjectingEnv counting(io::default_env());
    Outputs out;
    ASSERT_TRUE(read_targets(step_dir(), targets(out), counting, {.chunk_bytes = 1}).ok());
    total = counting.reads();
  }
  ASSERT_GT(total, 10);
  for (int n : {1, 2, total / 2, total}) {
    SCOPED_TRACE("failing read " + std::to_string(n) + " of " + std::to_string(total));
    io::FaultInjectingEnv failing(io::default_env());
    failing.fail_nth_read(n);
    Outputs out;
    const Status st =
        read_targets(step_dir(), targets(out), failing, {.chunk_bytes = 1, .buffers = 2});
    ASSERT_EQ(st.code(), StatusCode::kIOError) << st.to_string();
    EXPECT_TRUE(has(st, "injected fault")) << st.message();
    EXPECT_TRUE(has(st, step_dir() + "/rank-0000")) << st.message();
    EXPECT_EQ(failing.injected_faults(), 1);
  }
}

TEST_F(ReadPipelineTest, AShortFileIsRefusedNamingTheShardItCuts) {
  fs::resize_file(step_dir() + "/rank-00001.data", 100);  // inside w's rows 11-36, cols 0-13
  Outputs out;
  const Status st = read_targets(step_dir(), targets(out), io::default_env());
  ASSERT_EQ(st.code(), StatusCode::kCorruption) << st.to_string();
  EXPECT_TRUE(has(st, step_dir() + "/rank-00001.data: tensor \"w\"")) << st.message();
  EXPECT_TRUE(has(st, "the file has only 100 bytes (truncated?)")) << st.message();
}

TEST_F(ReadPipelineTest, AMissingFileIsNotFound) {
  fs::remove(step_dir() + "/rank-00001.data");
  Outputs out;
  const Status st = read_targets(step_dir(), targets(out), io::default_env());
  ASSERT_EQ(st.code(), StatusCode::kNotFound) << st.to_string();
  EXPECT_TRUE(has(st, "rank-00001.data")) << st.message();
}

}  // namespace
}  // namespace ms::ckpt
