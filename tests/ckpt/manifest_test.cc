// The manifest format: round trip, validation of damaged manifests (naming file and key),
// version handling, and resolution of "a checkpoint" paths.
#include <gtest/gtest.h>

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

TEST(ManifestNames, StepAndDataFileNames) {
  EXPECT_EQ(step_dir_name(100), "step-00000100");
  EXPECT_EQ(data_file_name(1), "rank-00001.data");
}

}  // namespace
}  // namespace ms::ckpt
