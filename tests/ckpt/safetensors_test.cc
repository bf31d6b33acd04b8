// The safetensors container: round trips, the exact bytes of a tiny file as the published layout
// defines them, and refusal of every kind of damage with the file and tensor named.
#include "ckpt/safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "io/atomic_file.h"
#include "io/fault_env.h"

namespace ms::ckpt {
namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ms_safetensors_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static void spit(const std::string& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  }
  // A file with the given JSON header and data section.
  void write_raw(const std::string& p, const std::string& header, const std::string& data) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    spit(p, bytes + header + data);
  }

  std::string dir_;
};

Tensor iota_f32(std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::kF32, std::move(shape));
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 0.5f * static_cast<float>(i) - 1.0f;
  return t;
}

TEST_F(SafetensorsTest, RoundTripsTensorsAndMetadataInOrder) {
  Tensor a = iota_f32({2, 3});
  Tensor b = Tensor::zeros(DType::kI64, {4});
  b.data<int64_t>()[3] = -7;
  Tensor c = Tensor::empty(DType::kBF16, {1});
  c.data<bf16>()[0] = bf16{0x3f80};
  std::vector<NamedTensor> tensors = {{"layer.a", &a}, {"b", &b}, {"c", &c}};
  ASSERT_TRUE(write_safetensors(path("m.safetensors"), tensors, {{"format", "pt"}}).ok());

  Result<SafetensorsFile> f = SafetensorsFile::open(path("m.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[0].name, "layer.a");
  EXPECT_EQ(f->tensors()[1].name, "b");
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->tensors()[0].file_offset % 8, 0u) << "data section must stay 8-byte aligned";

  Result<Tensor> ra = f->read("layer.a");
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(ra->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(ra->raw_data(), a.raw_data(), a.nbytes()), 0);
  EXPECT_EQ(f->read("b")->data<int64_t>()[3], -7);
  EXPECT_EQ(f->read("c")->data<bf16>()[0].bits, 0x3f80);
  EXPECT_EQ(f->read("missing").status().code(), StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, WritesThePublishedByteLayout) {
  Tensor t = Tensor::empty(DType::kF32, {2});
  t.data<float>()[0] = 1.0f;
  t.data<float>()[1] = -2.0f;
  std::vector<NamedTensor> tensors = {{"w", &t}};
  ASSERT_TRUE(write_safetensors(path("w.safetensors"), tensors).ok());
  const std::string header = R"({"w":{"data_offsets":[0,8],"dtype":"F32","shape":[2]}})";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  std::string expected(8, '\0');
  expected[0] = static_cast<char>(padded.size());
  expected += padded;
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  EXPECT_EQ(slurp(path("w.safetensors")), expected);
}

TEST_F(SafetensorsTest, ReadsAFileWrittenByHand) {
  write_raw(path("h.safetensors"),
            R"({"__metadata__":{"k":"v"},"x":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})",
            "abc");
  Result<SafetensorsFile> f = SafetensorsFile::open(path("h.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(std::string(static_cast<const char*>(f->read("x")->raw_data()), 3), "abc");
}

struct BadFile {
  const char* what;
  std::string header;
  std::string data;
  const char* message;
};

TEST_F(SafetensorsTest, RefusesDamagedHeadersNamingTheProblem) {
  const BadFile cases[] = {
      {"not json", "{nope", "", "not a JSON object"},
      {"unknown dtype", R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
       std::string(8, '\0'), "tensor 'x': dtype 'F64' is not supported"},
      {"length mismatch", R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
       std::string(8, '\0'), "expected 12"},
      {"missing key", R"({"x":{"dtype":"F32","shape":[2]}})", std::string(8, '\0'),
       "needs \"dtype\", \"shape\" and \"data_offsets\""},
      {"overlap",
       R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"y":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
       "abc", "overlaps"},
      {"truncated data", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       std::string(5, '\0'), "truncated or trailing"},
      {"negative dim", R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", "",
       "non-integer or negative"},
  };
  for (const BadFile& c : cases) {
    write_raw(path("bad.safetensors"), c.header, c.data);
    Result<SafetensorsFile> f = SafetensorsFile::open(path("bad.safetensors"));
    ASSERT_FALSE(f.ok()) << c.what;
    EXPECT_EQ(f.status().code(), StatusCode::kCorruption) << c.what;
    EXPECT_NE(f.status().message().find(path("bad.safetensors")), std::string::npos) << c.what;
    EXPECT_NE(f.status().message().find(c.message), std::string::npos)
        << c.what << ": " << f.status().message();
  }
}

TEST_F(SafetensorsTest, RefusesHeaderLengthPastTheEndAndTinyFiles) {
  spit(path("tiny.safetensors"), "abc");
  EXPECT_NE(SafetensorsFile::open(path("tiny.safetensors")).status().message().find("shorter than"),
            std::string::npos);
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(200);
  spit(path("long.safetensors"), bytes + "{}");
  EXPECT_NE(SafetensorsFile::open(path("long.safetensors")).status().message().find("exceeds the file"),
            std::string::npos);
}

TEST_F(SafetensorsTest, RefusesDuplicateNamesOnWrite) {
  Tensor a = iota_f32({1});
  std::vector<NamedTensor> tensors = {{"a", &a}, {"a", &a}};
  EXPECT_EQ(write_safetensors(path("d.safetensors"), tensors).code(), StatusCode::kInvalidArgument);
}

TEST_F(SafetensorsTest, FailedWriteLeavesThePreviousFileIntact) {
  Tensor a = iota_f32({64});
  std::vector<NamedTensor> tensors = {{"a", &a}};
  ASSERT_TRUE(write_safetensors(path("keep.safetensors"), tensors).ok());
  const std::string before = slurp(path("keep.safetensors"));

  io::FaultInjectingEnv faulty(io::default_env());
  faulty.enospc_after(100);
  Tensor b = iota_f32({128});
  std::vector<NamedTensor> bigger = {{"b", &b}};
  EXPECT_FALSE(write_safetensors(path("keep.safetensors"), bigger, {}, faulty).ok());
  EXPECT_EQ(slurp(path("keep.safetensors")), before);
  EXPECT_TRUE(SafetensorsFile::open(path("keep.safetensors")).ok());
}

}  // namespace
}  // namespace ms::ckpt
