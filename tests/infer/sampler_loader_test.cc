// Sampling rules (greedy ties, top-k, top-p, per-index reproducibility), the Hugging Face
// directory round trip (config.json + safetensors + tokenizer.json) with its refusals, and stop
// strings through the real GPT-2 tokenizer.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "ckpt/safetensors.h"
#include "infer/engine.h"
#include "infer/model_loader.h"
#include "infer/quantized_model.h"
#include "infer/sampler.h"
#include "io/atomic_file.h"
#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

using testing::gpt2_tokenizer;

TEST(Sampler, GreedyPicksTheLowestIdAmongTies) {
  const float logits[] = {0.5f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(sample_token(logits, 4, SamplingParams{}, 0), 1);
}

TEST(Sampler, TopKOfOneIsGreedyAtAnyTemperature) {
  const float logits[] = {0.1f, 0.3f, 0.2f, 0.25f};
  for (int64_t i = 0; i < 20; ++i) {
    EXPECT_EQ(sample_token(logits, 4, SamplingParams{5.0, 1, 1.0, 7}, i), 1);
  }
}

TEST(Sampler, TopPKeepsOnlyTheNucleus) {
  const float logits[] = {3.0f, 2.9f, -5.0f, -5.0f, -5.0f};
  std::set<int32_t> seen;
  for (int64_t i = 0; i < 200; ++i) seen.insert(sample_token(logits, 5, {1.0, 0, 0.9, 3}, i));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

TEST(Sampler, TheDrawDependsOnlyOnSeedAndIndex) {
  std::vector<float> logits(50, 0.0f);
  const SamplingParams p{1.0, 0, 1.0, 42};
  std::vector<int32_t> a, b;
  for (int64_t i = 0; i < 30; ++i) a.push_back(sample_token(logits.data(), 50, p, i));
  for (int64_t i = 30; i-- > 0;) b.insert(b.begin(), sample_token(logits.data(), 50, p, i));
  EXPECT_EQ(a, b);
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 10u);
}

Request make_request(std::string id, std::vector<int32_t> prompt, int64_t max_tokens) {
  Request r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

class HfDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        (std::filesystem::temp_directory_path() / ("ms_infer_test_" + std::to_string(::getpid())))
            .string();
    config::ModelConfig c = testing::tiny_moe();
    c.vocab_size = 50304;  // GPT-2's 50257 rounded up
    c.d_model = 16;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    Result<std::unique_ptr<model::Transformer>> m = model::Transformer::create(c, 5);
    ASSERT_TRUE(m.ok());
    model_ = std::move(*m);
    ASSERT_TRUE(save_hf_model(*model_, gpt2_tokenizer(), dir_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  std::unique_ptr<model::Transformer> model_;
};

TEST_F(HfDirectory, RoundTripGivesTheSameModelAndTokenizer) {
  Result<LoadedModel> loaded = load_hf_model(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->model->config(), model_->config());
  const std::vector<int32_t> ids = loaded->tokenizer->encode("To be, or not to be");
  Result<Tensor> a = model_->forward_logits(ids.data(), 1, static_cast<int64_t>(ids.size()));
  Result<Tensor> b = loaded->model->forward_logits(ids.data(), 1, static_cast<int64_t>(ids.size()));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(
      std::equal(a->span<float>().begin(), a->span<float>().end(), b->span<float>().begin()));
}

// A model loaded to serve has no gradients, and a weight converted as it loads keeps no f32
// value; the result equals loading in f32 and converting afterwards, logits bit for bit.
TEST_F(HfDirectory, ConvertingAsItLoadsEqualsConvertingAfterAndKeepsNoF32Copy) {
  const WeightOptions int8{ops::WeightFormat::kInt8};
  Result<LoadedModel> at_load = load_hf_model(dir_, {}, int8);
  ASSERT_TRUE(at_load.ok()) << at_load.status().message();
  Result<LoadedModel> after = load_hf_model(dir_);
  ASSERT_TRUE(after.ok()) << after.status().message();
  Result<ServingWeightStats> converted = quantize_for_serving(*after->model, int8);
  ASSERT_TRUE(converted.ok()) << converted.status().message();
  EXPECT_EQ(at_load->serving_weights.matrices, converted->matrices);
  EXPECT_EQ(at_load->serving_weights.quantized_bytes, converted->quantized_bytes);
  EXPECT_GT(converted->matrices, 0);

  const std::vector<size_t> linear = at_load->model->cached_linear_parameters();
  for (size_t i = 0; i < at_load->model->parameters().size(); ++i) {
    const model::Parameter& p = at_load->model->parameters()[i];
    EXPECT_EQ(p.grad.raw_data(), nullptr) << p.name;
    const bool is_linear = std::find(linear.begin(), linear.end(), i) != linear.end();
    EXPECT_EQ(p.value.raw_data() == nullptr, is_linear) << p.name;
  }

  const Request r = make_request("r", at_load->tokenizer->encode("To be, or not to be"), 6);
  EngineOptions o;
  o.stop_at_eos = false;
  o.keep_logits = true;
  std::vector<Completion> out;
  for (LoadedModel* m : {&*at_load, &*after}) {
    Result<std::unique_ptr<Engine>> engine = Engine::create(*m->model, nullptr, o);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    Result<std::vector<Completion>> c = (*engine)->generate({r});
    ASSERT_TRUE(c.ok()) << c.status().message();
    out.push_back(c->at(0));
  }
  EXPECT_EQ(out[0].tokens, out[1].tokens);
  EXPECT_EQ(out[0].logits, out[1].logits);
}

TEST_F(HfDirectory, WeightsOnAQuantizedDirectoryAreRefused) {
  const std::string q = dir_ + "/q";
  Result<LoadedModel> f32 = load_hf_model(dir_);
  ASSERT_TRUE(f32.ok());
  ASSERT_TRUE(save_quantized_model(*f32->model,
                                   uniform_assignment(*f32->model, {ops::WeightFormat::kInt8}),
                                   gpt2_tokenizer(), q)
                  .ok());
  Result<LoadedModel> loaded = load_hf_model(q, {}, {ops::WeightFormat::kInt4, 64});
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("already quantized"), std::string::npos)
      << loaded.status().message();
}

TEST_F(HfDirectory, ConfigMissingAKeyIsRefusedNamingIt) {
  Result<std::string> text = io::read_file(dir_ + "/config.json");
  ASSERT_TRUE(text.ok());
  std::string edited = *text;
  const size_t at = edited.find("\"num_hidden_layers\"");
  edited.replace(at, 19, "\"n_layers_renamed\"");
  ASSERT_TRUE(io::write_file_atomic(dir_ + "/config.json", edited).ok());
  Result<LoadedModel> loaded = load_hf_model(dir_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("missing key \"num_hidden_layers\""), std::string::npos)
      << loaded.status().message();
}

// A model using what the toolkit's model does not implement is refused naming the key, not
// served wrongly.
TEST_F(HfDirectory, ConfigWithAFeatureTheModelLacksIsRefusedNamingIt) {
  Result<std::string> text = io::read_file(dir_ + "/config.json");
  ASSERT_TRUE(text.ok());
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"attention_bias", "true"},
           {"rope_scaling", R"({"type": "linear", "factor": 2.0})"},
           {"hidden_act", R"("gelu")"}}) {
    nlohmann::json j = nlohmann::json::parse(*text);
    j[key] = nlohmann::json::parse(value);
    ASSERT_TRUE(io::write_file_atomic(dir_ + "/config.json", j.dump()).ok());
    Result<LoadedModel> loaded = load_hf_model(dir_);
    ASSERT_FALSE(loaded.ok()) << key;
    EXPECT_NE(loaded.status().message().find(key), std::string::npos)
        << loaded.status().message();
    EXPECT_NE(loaded.status().message().find(dir_ + "/config.json"), std::string::npos)
        << loaded.status().message();
  }
}

TEST_F(HfDirectory, MissingOrMisshapenTensorIsRefusedNamingIt) {
  std::vector<ckpt::NamedTensor> tensors;
  for (const model::Parameter& p : model_->parameters()) {
    if (p.name != "model.norm.weight") tensors.push_back({p.name, &p.value});
  }
  ASSERT_TRUE(ckpt::write_safetensors(dir_ + "/model.safetensors", tensors).ok());
  Result<LoadedModel> loaded = load_hf_model(dir_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("model.norm.weight"), std::string::npos);
  const Tensor wrong = Tensor::zeros(DType::kF32, {3});
  tensors.push_back({"model.norm.weight", &wrong});
  ASSERT_TRUE(ckpt::write_safetensors(dir_ + "/model.safetensors", tensors).ok());
  loaded = load_hf_model(dir_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("has shape"), std::string::npos)
      << loaded.status().message();
}

// config.json's sizes meet the weights before the model is allocated: 10^9 layers of this
// model would need terabytes, and are refused from the safetensors headers alone.
TEST_F(HfDirectory, ConfigSizesTheWeightsDoNotHaveAreRefusedBeforeAllocating) {
  Result<std::string> text = io::read_file(dir_ + "/config.json");
  ASSERT_TRUE(text.ok());
  nlohmann::json j = nlohmann::json::parse(*text);
  j["num_hidden_layers"] = 1000000000;
  ASSERT_TRUE(io::write_file_atomic(dir_ + "/config.json", j.dump()).ok());
  Result<LoadedModel> loaded = load_hf_model(dir_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find(dir_ + "/config.json implies"), std::string::npos)
      << loaded.status().message();
  j["num_hidden_layers"] = 1;
  j["vocab_size"] = 1LL << 40;
  ASSERT_TRUE(io::write_file_atomic(dir_ + "/config.json", j.dump()).ok());
  loaded = load_hf_model(dir_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("vocab_size = 1099511627776"), std::string::npos)
      << loaded.status().message();
}

// An index whose weight_map leaves the model directory is refused naming the file and entry.
TEST_F(HfDirectory, AnEscapingIndexIsRefused) {
  const nlohmann::json index = {{"weight_map", {{"model.norm.weight", "../../etc/passwd"}}}};
  ASSERT_TRUE(io::write_file_atomic(dir_ + "/model.safetensors.index.json", index.dump()).ok());
  Result<LoadedModel> loaded = load_hf_model(dir_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find(dir_ + "/model.safetensors.index.json: weight_map['"
                                           "model.norm.weight'] = \"../../etc/passwd\""),
            std::string::npos)
      << loaded.status().message();
}

// Serving a checkpoint reads it through the same validated manifest as every other reader.
TEST(CheckpointModel, OverlappingShardsAreRefusedNamingTheTensorAndBoxes) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("ms_infer_overlap_" + std::to_string(::getpid())))
                              .string();
  std::filesystem::create_directories(dir + "/step-00000001");
  const nlohmann::json shard = {{"file", "rank-00000.data"}, {"offset", 0}, {"length", 24},
                                {"global_offsets", {0, 0}}, {"lengths", {2, 3}},
                                {"codec", "raw"}, {"crc32c", 0}};
  const nlohmann::json manifest = {
      {"format_version", 1}, {"step", 1}, {"toolkit_version", "x"}, {"git_revision", "x"},
      {"config_yaml", ""}, {"state", nlohmann::json::object()},
      {"layout", {{"world", 1}, {"dp", 1}, {"tp", 1}, {"pp", 1}, {"ep", 1}, {"zero", 0}}},
      {"tensors", {{{"name", "model.norm.weight"}, {"dtype", "f32"}, {"global_shape", {4, 3}},
                    {"shards", {shard, shard}}}}}};
  ASSERT_TRUE(io::write_file_atomic(dir + "/step-00000001/manifest.json", manifest.dump()).ok());
  Result<LoadedModel> loaded = load_checkpoint_model(dir + "/step-00000001");
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("tensor \"model.norm.weight\" of shape [4, 3]: shards "
                                           "overlap: shard [0:2, 0:3]"),
            std::string::npos)
      << loaded.status().message();
}

TEST_F(HfDirectory, StopStringCutsTheText) {
  Result<LoadedModel> loaded = load_hf_model(dir_);
  ASSERT_TRUE(loaded.ok());
  Request r = make_request("s", loaded->tokenizer->encode("ROMEO:"), 12);
  EngineOptions options;
  options.stop_at_eos = false;
  Result<std::unique_ptr<Engine>> created =
      Engine::create(*loaded->model, loaded->tokenizer.get(), options);
  ASSERT_TRUE(created.ok());
  Engine* engine = created->get();
  const Completion free_run = (*engine->generate({r}))[0];
  ASSERT_GE(free_run.text.size(), 4u);
  r.stop = {free_run.text.substr(free_run.text.size() / 2, 2)};
  const Completion cut = (*engine->generate({r}))[0];
  EXPECT_EQ(cut.finish_reason, "stop");
  EXPECT_EQ(cut.text, free_run.text.substr(0, free_run.text.find(r.stop[0])));
}

}  // namespace
}  // namespace ms::infer
