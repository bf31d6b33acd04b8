// Model exchange with Hugging Face: the tensor names and config.json written for dense, MoE and
// shared-expert models, refusal of options with no Hugging Face equivalent, splitting into
// several files with an index, an export -> import round trip that is bitwise exact, and import
// refusing truncated, corrupt-headed or missing safetensors files naming the file and the fault.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ckpt/hf_export.h"
#include "ckpt/hf_import.h"
#include "ckpt/hf_names.h"
#include "ckpt/safetensors.h"
#include "model/transformer.h"

namespace ms::ckpt {
namespace {

namespace fs = std::filesystem;

config::ModelConfig tiny_dense() {
  config::ModelConfig c;
  c.vocab_size = 32;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  c.max_seq_len = 64;
  return c;
}

config::ModelConfig tiny_moe(int64_t shared_d_ff) {
  config::ModelConfig c = tiny_dense();
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.shared_expert_d_ff = shared_d_ff;
  return c;
}

// A catalog over the parameters of a freshly initialized Transformer.
struct ModelCatalog {
  std::unique_ptr<model::Transformer> model;
  TensorCatalog catalog;
};

ModelCatalog catalog_of(const config::ModelConfig& c) {
  ModelCatalog mc;
  mc.model = model::Transformer::create(c, 7).value();
  model::Transformer* m = mc.model.get();
  for (const model::Parameter& p : m->parameters()) {
    mc.catalog.tensors.push_back(TensorInfo{p.name, DType::kF32, p.global_shape});
  }
  mc.catalog.read = [m](const std::string& name) -> Result<Tensor> {
    MS_ASSIGN_OR_RETURN(size_t i, m->parameter_index(name));
    return m->parameters()[i].value.clone();
  };
  return mc;
}

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class HfExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ms_hf_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  HfExportOptions options(const std::string& name) const {
    HfExportOptions o;
    o.output_dir = dir_ + "/" + name;
    return o;
  }
  nlohmann::json config_json(const std::string& name) const {
    return nlohmann::json::parse(slurp(dir_ + "/" + name + "/config.json"));
  }

  std::string dir_;
};

TEST_F(HfExchangeTest, ParameterSpecsMatchTheTransformerForEveryVariant) {
  for (const config::ModelConfig& c : {tiny_dense(), tiny_moe(0), tiny_moe(8)}) {
    ModelCatalog mc = catalog_of(c);
    const std::vector<TensorInfo> specs = hf_parameter_specs(c);
    ASSERT_EQ(specs.size(), mc.catalog.tensors.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(specs[i].name, mc.catalog.tensors[i].name);
      EXPECT_EQ(specs[i].shape, mc.catalog.tensors[i].shape);
    }
  }
}

TEST_F(HfExchangeTest, DenseExportWritesLlamaNamesAndConfig) {
  ModelCatalog mc = catalog_of(tiny_dense());
  Result<HfExportSummary> r = export_hf(tiny_dense(), mc.catalog, options("dense"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->files, std::vector<std::string>{"model.safetensors"});
  Result<SafetensorsFile> f = SafetensorsFile::open(dir_ + "/dense/model.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_NE(f->find("model.layers.1.self_attn.k_proj.weight"), nullptr);
  EXPECT_NE(f->find("model.layers.0.mlp.down_proj.weight"), nullptr);
  EXPECT_NE(f->find("lm_head.weight"), nullptr);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const nlohmann::json j = config_json("dense");
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["hidden_size"], 16);
  EXPECT_EQ(j["intermediate_size"], 24);
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["vocab_size"], 32);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_FALSE(fs::exists(dir_ + "/dense/model.safetensors.index.json"));
}

TEST_F(HfExchangeTest, MoeExportWritesMixtralAndSharedExpertNames) {
  const config::ModelConfig c = tiny_moe(8);
  ModelCatalog mc = catalog_of(c);
  ASSERT_TRUE(export_hf(c, mc.catalog, options("moe")).ok());
  Result<SafetensorsFile> f = SafetensorsFile::open(dir_ + "/moe/model.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_NE(f->find("model.layers.0.block_sparse_moe.gate.weight"), nullptr);
  EXPECT_NE(f->find("model.layers.1.block_sparse_moe.experts.3.w2.weight"), nullptr);
  EXPECT_NE(f->find("model.layers.1.mlp.shared_expert.up_proj.weight"), nullptr);
  const nlohmann::json j = config_json("moe");
  EXPECT_EQ(j["architectures"][0], "MixtralForCausalLM");
  EXPECT_EQ(j["num_local_experts"], 4);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  EXPECT_EQ(j["shared_expert_intermediate_size"], 8);
}

TEST_F(HfExchangeTest, ParallelBlockAndSlidingWindowAreRefusedAndNothingIsWritten) {
  config::ModelConfig c = tiny_dense();
  c.parallel_block = true;
  ModelCatalog mc = catalog_of(c);
  Result<HfExportSummary> r = export_hf(c, mc.catalog, options("pb"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.parallel_block"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ + "/pb"));
  c.parallel_block = false;
  c.sliding_window = 8;
  EXPECT_NE(check_hf_exportable(c).message().find("model.sliding_window"), std::string::npos);
}

TEST_F(HfExchangeTest, MissingParameterIsNamed) {
  ModelCatalog mc = catalog_of(tiny_dense());
  mc.catalog.tensors.pop_back();  // lm_head.weight
  Result<HfExportSummary> r = export_hf(tiny_dense(), mc.catalog, options("x"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lm_head.weight"), std::string::npos);
}

TEST_F(HfExchangeTest, SplitsPastTheSizeLimitWithAnIndex) {
  ModelCatalog mc = catalog_of(tiny_dense());
  HfExportOptions o = options("split");
  o.max_shard_bytes = 4096;
  Result<HfExportSummary> r = export_hf(tiny_dense(), mc.catalog, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_GT(r->files.size(), 1u);
  EXPECT_EQ(r->files[0], "model-00001-of-0000" + std::to_string(r->files.size()) + ".safetensors");
  const auto index = nlohmann::json::parse(slurp(dir_ + "/split/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], r->tensor_bytes);
  EXPECT_EQ(index["weight_map"].size(), mc.catalog.tensors.size());
  for (const std::string& file : r->files) {
    Result<SafetensorsFile> f = SafetensorsFile::open(dir_ + "/split/" + file);
    ASSERT_TRUE(f.ok());
    uint64_t bytes = 0;
    for (const auto& e : f->tensors()) bytes += e.length;
    EXPECT_TRUE(bytes <= 4096 || f->tensors().size() == 1) << file;
  }
}

void expect_round_trip(const config::ModelConfig& c, const std::string& dir, uint64_t max_bytes) {
  ModelCatalog mc = catalog_of(c);
  HfExportOptions o;
  o.output_dir = dir;
  o.max_shard_bytes = max_bytes;
  ASSERT_TRUE(export_hf(c, mc.catalog, o).ok());
  Result<HfModel> m = open_hf_model(dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->config, c);
  ASSERT_EQ(m->parameters.tensors.size(), mc.catalog.tensors.size());
  for (const TensorInfo& t : mc.catalog.tensors) {
    Tensor a = mc.catalog.read(t.name).value();
    Result<Tensor> b = m->parameters.read(t.name);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    ASSERT_EQ(a.shape(), b->shape());
    EXPECT_EQ(std::memcmp(a.raw_data(), b->raw_data(), a.nbytes()), 0) << t.name;
  }
}

TEST_F(HfExchangeTest, ExportThenImportIsBitwiseForDenseTiedAndMoe) {
  config::ModelConfig tied = tiny_dense();
  tied.tie_embeddings = true;
  expect_round_trip(tiny_dense(), dir_ + "/a", 1 << 20);
  expect_round_trip(tied, dir_ + "/b", 2048);
  expect_round_trip(tiny_moe(8), dir_ + "/c", 8192);
}

TEST_F(HfExchangeTest, ImportRefusesUnknownArchitectureAndUnexpectedTensors) {
  ModelCatalog mc = catalog_of(tiny_dense());
  ASSERT_TRUE(export_hf(tiny_dense(), mc.catalog, options("m")).ok());
  nlohmann::json j = config_json("m");
  j["architectures"] = {"GPT2LMHeadModel"};
  std::ofstream(dir_ + "/m/config.json") << j.dump();
  Result<HfModel> r = open_hf_model(dir_ + "/m");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("GPT2LMHeadModel"), std::string::npos);

  j["architectures"] = {"LlamaForCausalLM"};
  j["num_hidden_layers"] = 1;  // layer 1's tensors are now unexpected
  std::ofstream(dir_ + "/m/config.json") << j.dump();
  r = open_hf_model(dir_ + "/m");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unexpected tensor 'model.layers.1."), std::string::npos);
}

TEST_F(HfExchangeTest, ImportRefusesFeaturesTheModelLacks) {
  nlohmann::json j = hf_config_json(tiny_dense());
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  Result<config::ModelConfig> r = model_config_from_hf_json(j, "x/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("x/config.json: rope_scaling"), std::string::npos);
  j = hf_config_json(tiny_dense());
  j.erase("hidden_size");
  r = model_config_from_hf_json(j, "x/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing key \"hidden_size\""), std::string::npos);
}

TEST_F(HfExchangeTest, ImportWidensBf16WeightsToF32) {
  const config::ModelConfig c = tiny_dense();
  std::vector<Tensor> owned;
  for (const TensorInfo& t : hf_parameter_specs(c)) {
    Tensor x = Tensor::empty(DType::kBF16, t.shape);
    x.fill(bf16{float_to_bf16(0.5f)});
    owned.push_back(std::move(x));
  }
  std::vector<NamedTensor> named;
  const auto specs = hf_parameter_specs(c);
  for (size_t i = 0; i < specs.size(); ++i) named.push_back({specs[i].name, &owned[i]});
  fs::create_directories(dir_ + "/bf");
  ASSERT_TRUE(write_safetensors(dir_ + "/bf/model.safetensors", named).ok());
  std::ofstream(dir_ + "/bf/config.json") << hf_config_json(c).dump();
  Result<HfModel> m = open_hf_model(dir_ + "/bf");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Result<Tensor> t = m->parameters.read("model.norm.weight");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->dtype(), DType::kF32);
  EXPECT_EQ(t->data<float>()[3], 0.5f);
}

// Bytes [offset, offset + text.size()) of `path` replaced by `text`.
void overwrite(const std::string& path, uint64_t offset, const std::string& text) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
}

// What importing `dir` says; the import must fail with Corruption or NotFound naming `file`.
std::string import_error(const std::string& dir, const std::string& file) {
  Result<HfModel> m = open_hf_model(dir);
  EXPECT_FALSE(m.ok()) << dir;
  if (m.ok()) return "";
  EXPECT_TRUE(m.status().code() == StatusCode::kCorruption ||
              m.status().code() == StatusCode::kNotFound)
      << m.status().to_string();
  EXPECT_NE(m.status().message().find(file), std::string::npos) << m.status().message();
  return m.status().message();
}

TEST_F(HfExchangeTest, ImportRefusesTruncatedFilesNamingTheFileAndTheProblem) {
  ModelCatalog mc = catalog_of(tiny_dense());
  ASSERT_TRUE(export_hf(tiny_dense(), mc.catalog, options("t")).ok());
  const std::string file = dir_ + "/t/model.safetensors";
  const uint64_t size = fs::file_size(file);
  fs::resize_file(file, size - 10);  // the last tensor loses its tail
  EXPECT_NE(import_error(dir_ + "/t", file).find("truncated or trailing"), std::string::npos);
  fs::resize_file(file, 40);  // cut inside the JSON header
  EXPECT_NE(import_error(dir_ + "/t", file).find("exceeds the file"), std::string::npos);
  fs::resize_file(file, 5);  // not even the header length
  EXPECT_NE(import_error(dir_ + "/t", file).find("shorter than the 8-byte header length"),
            std::string::npos);
}

TEST_F(HfExchangeTest, ImportRefusesACorruptHeaderNamingTheFile) {
  ModelCatalog mc = catalog_of(tiny_dense());
  ASSERT_TRUE(export_hf(tiny_dense(), mc.catalog, options("h")).ok());
  const std::string file = dir_ + "/h/model.safetensors";
  overwrite(file, 8, "#");  // the header's opening brace
  EXPECT_NE(import_error(dir_ + "/h", file).find("header is not a JSON object"),
            std::string::npos);
  overwrite(file, 8, "{");
  overwrite(file, 0, std::string("\xff\xff\xff\xff", 4));  // a huge header length
  EXPECT_NE(import_error(dir_ + "/h", file).find("exceeds the file"), std::string::npos);
}

TEST_F(HfExchangeTest, ImportOfASplitModelNamesTheDamagedOrMissingShard) {
  ModelCatalog mc = catalog_of(tiny_dense());
  HfExportOptions o = options("s");
  o.max_shard_bytes = 4096;
  Result<HfExportSummary> r = export_hf(tiny_dense(), mc.catalog, o);
  ASSERT_TRUE(r.ok() && r->files.size() > 2) << r.status().to_string();
  const std::string second = dir_ + "/s/" + r->files[1];
  const std::string saved = slurp(second);
  fs::resize_file(second, fs::file_size(second) - 1);
  EXPECT_NE(import_error(dir_ + "/s", second).find("truncated or trailing"), std::string::npos);
  fs::remove(second);
  import_error(dir_ + "/s", second);
  std::ofstream(second, std::ios::binary) << saved;
  EXPECT_TRUE(open_hf_model(dir_ + "/s").ok());
}

TEST_F(HfExchangeTest, ATensorReadPastAFileShrunkAfterOpeningNamesFileTensorAndOffset) {
  ModelCatalog mc = catalog_of(tiny_dense());
  ASSERT_TRUE(export_hf(tiny_dense(), mc.catalog, options("late")).ok());
  Result<HfModel> m = open_hf_model(dir_ + "/late");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const std::string file = dir_ + "/late/model.safetensors";
  Result<SafetensorsFile> st = SafetensorsFile::open(file);
  ASSERT_TRUE(st.ok());
  const SafetensorsEntry last = st->tensors().back();
  fs::resize_file(file, last.file_offset + 4);
  Result<Tensor> t = m->parameters.read(last.name);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kCorruption);
  const std::string& msg = t.status().message();
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor '" + last.name + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("offset " + std::to_string(last.file_offset + 4)), std::string::npos) << msg;
}

// config.json's sizes are checked against the weights before anything is built from them: a
// layer count of 10^8 would otherwise list 10^9 tensor specs (and a model of that size).
TEST_F(HfExchangeTest, ImportRefusesConfigSizesTheWeightsDoNotHave) {
  ModelCatalog mc = catalog_of(tiny_dense());
  ASSERT_TRUE(export_hf(tiny_dense(), mc.catalog, options("m")).ok());
  const nlohmann::json good = config_json("m");
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* message;
  };
  const Case cases[] = {
      {"num_hidden_layers", 100000000, "implies 900000003 tensors (100000000 layers)"},
      {"num_hidden_layers", 1000000000000LL, "num_hidden_layers = 1000000000000 must be between 1"},
      {"vocab_size", 1LL << 40, "vocab_size = 1099511627776 must be between 1 and 2147483647"},
      {"num_attention_heads", 0, "num_attention_heads = 0 must be between 1"},
      {"num_key_value_heads", 3, "must be divisible by num_attention_heads 4, and that by "
                                 "num_key_value_heads 3"},
      {"hidden_size", -16, "hidden_size = -16 must be between 1"},
      {"vocab_size", 64, "tensor 'model.embed_tokens.weight' has shape [32, 16]; "},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    j[c.key] = c.value;
    std::ofstream(dir_ + "/m/config.json") << j.dump();
    Result<HfModel> r = open_hf_model(dir_ + "/m");
    ASSERT_FALSE(r.ok()) << c.key;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.key;
    EXPECT_NE(r.status().message().find(dir_ + "/m/config.json"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
  }
  nlohmann::json moe = hf_config_json(tiny_moe(0));
  moe["num_experts_per_tok"] = 9;
  Result<config::ModelConfig> parsed = model_config_from_hf_json(moe, "x/config.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("num_experts_per_tok 9 must be between 1 and "
                                           "num_local_experts 4"), std::string::npos);
}

// weight_map file names must stay inside the model directory: a hostile index cannot make
// import (or ms-infer) open files elsewhere.
TEST_F(HfExchangeTest, IndexEntriesOutsideTheModelDirectoryAreRefused) {
  ModelCatalog mc = catalog_of(tiny_dense());
  HfExportOptions o = options("split");
  o.max_shard_bytes = 4096;
  ASSERT_TRUE(export_hf(tiny_dense(), mc.catalog, o).ok());
  const std::string index_path = dir_ + "/split/model.safetensors.index.json";
  const nlohmann::json index = nlohmann::json::parse(slurp(index_path));
  for (const auto& e : fs::directory_iterator(dir_ + "/split")) {
    if (e.path().extension() == ".safetensors") {
      fs::copy_file(e.path(), dir_ + "/outside.safetensors", fs::copy_options::overwrite_existing);
    }
  }
  for (const std::string& escape :
       {std::string("../outside.safetensors"), dir_ + "/outside.safetensors",
        std::string("sub/../../outside.safetensors"), std::string("..")}) {
    nlohmann::json j = index;
    j["weight_map"]["model.norm.weight"] = escape;
    std::ofstream(index_path) << j.dump();
    Result<HfModel> r = open_hf_model(dir_ + "/split");
    ASSERT_FALSE(r.ok()) << escape;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_NE(r.status().message().find(index_path + ": weight_map['model.norm.weight'] = \"" +
                                        escape + "\" is not a file inside the model directory"),
              std::string::npos)
        << r.status().message();
    EXPECT_FALSE(open_safetensors_catalog(dir_ + "/split").ok()) << "diff reads indexes too";
  }
  EXPECT_TRUE(parse_safetensors_index(R"({"weight_map":{"a":"model-1.safetensors"}})", "i").ok());
}

}  // namespace
}  // namespace ms::ckpt
