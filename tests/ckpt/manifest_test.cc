// The manifest format: round trip, validation of damaged manifests (naming file and key),
// version handling, and resolution of "a checkpoint" paths.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <filesystem>
#include <unistd.h>

#include "ckpt/manifest.h"
#include "io/atomic_file.h"

namespace ms::ckpt {
namespace {

namespace fs = std::filesystem;

Manifest sample() {
  Manifest m;
  m.step = 100;
  m.toolkit_version = "0.1.0";
  m.git_revision = "abc";
  m.config_yaml = "run: {}\n";
  m.layout = {2, 2, 1, 1, 1, 1};
  m.state = {{"optimizer_updates", 100}};
  TensorRecord t{"model.w", DType::kF32, {4, 3}, {}};
  t.shards.push_back({"rank-00000.data", 0, 24, {0, 0}, {2, 3}, "raw", 7});
  t.shards.push_back({"rank-00001.data", 0, 24, {2, 0}, {2, 3}, "raw", 9});
  m.tensors.push_back(t);
  return m;
}

class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ms-manifest-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "step-00000100");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string step_dir() const { return (dir_ / "step-00000100").string(); }
  void write_manifest(const std::string& text) {
    ASSERT_TRUE(io::write_file_atomic(step_dir() + "/manifest.json", text).ok());
  }
  fs::path dir_;
};

TEST_F(ManifestTest, RoundTripsThroughJson) {
  write_manifest(sample().to_json().dump());
  auto read = Manifest::read(step_dir());
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_EQ(read->tensors, sample().tensors);
  EXPECT_EQ(read->layout, sample().layout);
  EXPECT_EQ(read->state, sample().state);
  ASSERT_NE(read->find("model.w"), nullptr);
  EXPECT_EQ(read->find("model.x"), nullptr);
  EXPECT_EQ(read->find("model.w")->bytes(), 48u);
}

TEST_F(ManifestTest, MissingKeyIsNamed) {
  nlohmann::json j = sample().to_json();
  j["tensors"][0]["shards"][1].erase("crc32c");
  write_manifest(j.dump());
  auto read = Manifest::read(step_dir());
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kCorruption);
  EXPECT_NE(read.status().message().find("crc32c"), std::string::npos);
  EXPECT_NE(read.status().message().find("manifest.json"), std::string::npos);
  EXPECT_NE(read.status().message().find("model.w"), std::string::npos);
}

TEST_F(ManifestTest, AnImpossibleLayoutIsCorruptionNamingTheKey) {
  const std::string where = step_dir() + "/manifest.json layout: ";
  const struct {
    const char* key;
    int value;
    std::string message;
  } cases[] = {
      {"ep", -3, "\"ep\" is -3; a layout size must be at least 1"},
      {"world", 0, "\"world\" is 0; a layout size must be at least 1"},
      {"zero", 2, "\"zero\" is 2; it must be 0 or 1"},
      {"dp", 3, "\"world\" 2 is not a multiple of pp * dp * tp (1 * 3 * 1)"},
      {"tp", 2147483647, "\"world\" 2 is not a multiple of pp * dp * tp (1 * 2 * 2147483647)"},
      {"ep", 4, "\"ep\" 4 does not divide the 2 data-parallel x context-parallel ranks"},
  };
  for (const auto& c : cases) {
    nlohmann::json j = sample().to_json();
    j["layout"][c.key] = c.value;
    write_manifest(j.dump());
    auto read = Manifest::read(step_dir());
    ASSERT_FALSE(read.ok()) << c.key;
    EXPECT_EQ(read.status().code(), StatusCode::kCorruption);
    EXPECT_EQ(read.status().message(), where + c.message);
  }
  nlohmann::json j = sample().to_json();
  j["layout"] = {{"world", 8}, {"dp", 2}, {"tp", 2}, {"pp", 1}, {"ep", 4}, {"zero", 0}};
  write_manifest(j.dump());  // cp = 2: ep 4 divides dp x cp
  EXPECT_TRUE(Manifest::read(step_dir()).ok());
}

TEST_F(ManifestTest, ShardOutsideTheTensorIsRefused) {
  Manifest m = sample();
  m.tensors[0].shards[1].global_offsets = {3, 0};
  write_manifest(m.to_json().dump());
  auto read = Manifest::read(step_dir());
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("outside the tensor"), std::string::npos);
}

TEST_F(ManifestTest, WrongLengthAndUnknownCodecAreRefused) {
  Manifest m = sample();
  m.tensors[0].shards[0].length = 20;
  EXPECT_FALSE(m.validate("x").ok());
  m = sample();
  m.tensors[0].shards[0].codec = "lz4";
  EXPECT_NE(m.validate("x").message().find("lz4"), std::string::npos);
  m = sample();
  m.tensors[0].shards[0].file = "../etc/passwd";
  EXPECT_FALSE(m.validate("x").ok());
}

TEST_F(ManifestTest, NewerFormatIsRefusedOlderAccepted) {
  nlohmann::json j = sample().to_json();
  j["format_version"] = kFormatVersion + 1;
  write_manifest(j.dump());
  auto read = Manifest::read(step_dir());
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(Manifest::parse("[1,2]", "m.json").ok());
  EXPECT_FALSE(Manifest::parse("{", "m.json").ok());
}

TEST_F(ManifestTest, ResolvesStepDirCheckpointsDirAndLatestFile) {
  write_manifest(sample().to_json().dump());
  ASSERT_TRUE(io::write_file_atomic((dir_ / "latest").string(), "step-00000100\n").ok());
  EXPECT_EQ(*resolve_checkpoint(step_dir()), step_dir());
  EXPECT_EQ(*resolve_checkpoint(dir_.string()), step_dir());
  EXPECT_EQ(*resolve_checkpoint((dir_ / "latest").string()), step_dir());
  EXPECT_EQ(resolve_checkpoint((dir_ / "nothing").string()).status().code(), StatusCode::kNotFound);
}

TEST_F(ManifestTest, LatestNamingAMissingOrBadDirectoryIsAnError) {
  ASSERT_TRUE(io::write_file_atomic((dir_ / "latest").string(), "step-00000200\n").ok());
  EXPECT_EQ(resolve_checkpoint(dir_.string()).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(io::write_file_atomic((dir_ / "latest").string(), "../../etc\n").ok());
  EXPECT_EQ(resolve_checkpoint(dir_.string()).status().code(), StatusCode::kCorruption);
}

bool has(const Status& s, const std::string& part) {
  return s.message().find(part) != std::string::npos;
}

// The case: two identical shards covering half a tensor hold as many elements as the
// tensor, which an element count accepts. Box arithmetic refuses it naming both boxes.
TEST_F(ManifestTest, TwoIdenticalShardsOfHalfATensorAreAnOverlap) {
  Manifest m = sample();
  m.tensors[0].shards[1] = m.tensors[0].shards[0];
  m.tensors[0].shards[1].file = "rank-00001.data";
  write_manifest(m.to_json().dump());
  auto read = Manifest::read(step_dir());
  ASSERT_FALSE(read.ok());
  const Status& s = read.status();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_TRUE(has(s, "manifest.json")) << s.message();
  EXPECT_TRUE(has(s, "tensor \"model.w\"")) << s.message();
  EXPECT_TRUE(has(s, "shards overlap: shard [0:2, 0:3] (rank-00000.data offset 0) and shard "
                     "[0:2, 0:3] (rank-00001.data offset 0)")) << s.message();
}

TEST_F(ManifestTest, AMissingShardIsAGapNamingTheUncoveredBox) {
  Manifest m = sample();
  m.tensors[0].shards.pop_back();
  const Status s = m.validate("m.json");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_TRUE(has(s, "tensor \"model.w\" of shape [4, 3]: shards leave a gap: no shard holds "
                     "the elements [2:4, 0:3] after shard [0:2, 0:3]")) << s.message();
  m.tensors[0].shards.clear();
  EXPECT_TRUE(has(m.validate("m.json"), "[0:4, 0:3]"));
}

// A shape whose element count wraps to a small number (3 * 6148914691236517206 = 2 mod 2^64)
// must not pass for a small tensor: readers would size buffers from the wrapped count.
TEST_F(ManifestTest, OverflowingNegativeAndHugeShapesAreRefusedByName) {
  const int64_t wide = 6148914691236517206;
  Manifest m = sample();
  m.tensors[0].global_shape = {3, wide};
  m.tensors[0].shards = {{"rank-00000.data", 0, 24, {0, 0}, {3, wide}, "raw", 7}};
  Status s = m.validate("m.json");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_TRUE(has(s, "model.w")) << s.message();
  EXPECT_TRUE(has(s, "[3, 6148914691236517206]: dimension 1 is 6148914691236517206, above the "
                     "limit 2^62")) << s.message();
  m.tensors[0].global_shape = {1 << 30, 1 << 30, 1 << 30};
  m.tensors[0].shards = {{"rank-00000.data", 0, 24, {0, 0, 0}, {1, 1, 6}, "raw", 7}};
  EXPECT_TRUE(has(m.validate("m.json"), "element count overflows 64 bits"));
  m.tensors[0].global_shape = {1 << 21, 1 << 21, 1 << 21};  // 2^63 elements
  EXPECT_TRUE(has(m.validate("m.json"), "overflows 64 bits"));
  m.tensors[0].global_shape = {-4, 3};
  EXPECT_TRUE(has(m.validate("m.json"), "dimension 0 is negative"));
  // A shard box whose end overflows is outside the tensor, not wrapped inside it.
  m = sample();
  m.tensors[0].shards[1].global_offsets = {INT64_MAX, 0};
  EXPECT_TRUE(has(m.validate("m.json"), "outside the tensor"));
  m = sample();
  m.tensors[0].shards[1].offset = UINT64_MAX - 8;
  EXPECT_TRUE(has(m.validate("m.json"), "overflows 64 bits"));
}

// A zstd shard cannot hold more than the format's largest expansion of its stored bytes.
TEST_F(ManifestTest, ZstdShardTooSmallForItsBoxIsRefused) {
  Manifest m = sample();
  m.tensors[0].global_shape = {1 << 20, 1024};
  m.tensors[0].shards = {{"rank-00000.data", 0, 100, {0, 0}, {1 << 20, 1024}, "zstd", 7}};
  const Status s = m.validate("m.json");
  EXPECT_TRUE(has(s, "a zstd frame of 100 bytes cannot hold the 4294967296 bytes")) << s.message();
  m.tensors[0].shards[0].length = 1 << 20;
  EXPECT_TRUE(m.validate("m.json").ok());
}

TEST(Latest, OneParserForTheLatestFile) {
  EXPECT_EQ(latest_file_text("step-00000100"), "step-00000100\n");
  EXPECT_EQ(*parse_latest("step-00000100\n", "c/latest"), "step-00000100");
  EXPECT_EQ(*parse_latest("step-00000007 \r\n", "c/latest"), "step-00000007");
  for (const char* bad : {"", "step-", "step-12a", "../step-1", "step-1/x", "checkpoint-1"}) {
    Result<std::string> r = parse_latest(bad, "c/latest");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_TRUE(has(r.status(), "c/latest: expected the name of a step directory")) << bad;
  }
  EXPECT_EQ(parse_step_dir_name("step-00000100"), 100);
  EXPECT_EQ(parse_step_dir_name("step-x"), -1);
}

TEST(ManifestNames, StepAndDataFileNames) {
  EXPECT_EQ(step_dir_name(100), "step-00000100");
  EXPECT_EQ(data_file_name(1), "rank-00001.data");
}

}  // namespace
}  // namespace ms::ckpt
