// Quantized model directories (infer/quantized_model.h): a saved model serves bitwise like
// quantizing the original at load (same codes and scales in the file, same tokens and logits),
// for each format and a mixed assignment; the dequantized load equals the dequantized weights;
// and every inconsistency in the file is refused by name.
#include "infer/quantized_model.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "ckpt/safetensors.h"
#include "core/philox.h"
#include "infer/engine.h"
#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

using testing::take;
using testing::gpt2_tokenizer;

// Untied (so lm_head is quantized too), widths groups of 32 divide, GPT-2's vocabulary.
config::ModelConfig quantizable_model() {
  config::ModelConfig c = testing::tiny_dense();
  c.vocab_size = 50304;
  c.d_ff = 64;
  return c;
}

std::unique_ptr<model::Transformer> make_model(uint64_t seed = 11) {
  return take(model::Transformer::create(quantizable_model(), seed));
}

std::vector<Request> requests(int64_t vocab) {
  std::vector<Request> reqs;
  for (int64_t i = 0; i < 3; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    for (int64_t t = 0; t < 3 + 4 * i; ++t) {
      r.prompt.push_back(static_cast<int32_t>(
          uniform(static_cast<uint64_t>(90 + i), 1, static_cast<uint64_t>(t)) *
          static_cast<float>(vocab - 1)));
    }
    r.max_tokens = 5;
    reqs.push_back(r);
  }
  return reqs;
}

std::vector<Completion> generate(model::Transformer& m) {
  EngineOptions o;
  o.stop_at_eos = false;
  o.keep_logits = true;
  std::unique_ptr<Engine> engine = take(Engine::create(m, nullptr, o));
  return take(engine->generate(requests(m.config().vocab_size)));
}

class QuantizedModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("ms_quantized_model_test_" + std::to_string(::getpid())))
               .string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Saves the seed-11 model with `formats`.
  void save(const FormatAssignment& formats) {
    auto m = make_model();
    const Status s = save_quantized_model(*m, formats, gpt2_tokenizer(), dir_);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  FormatAssignment uniform(ops::WeightFormat f, int64_t group = 32) {
    return uniform_assignment(*make_model(), {f, group});
  }

  // Rewrites model.safetensors: `edit` may change the tensors and the metadata JSON.
  void rewrite(const std::function<void(std::map<std::string, Tensor>&, nlohmann::json&)>& edit) {
    const std::string path = dir_ + "/model.safetensors";
    const ckpt::SafetensorsFile file = take(ckpt::SafetensorsFile::open(path));
    std::map<std::string, Tensor> tensors;
    for (const ckpt::SafetensorsEntry& e : file.tensors()) tensors[e.name] = take(file.read(e.name));
    nlohmann::json meta = nlohmann::json::parse(file.metadata().at(kQuantizationMetadataKey));
    edit(tensors, meta);
    std::vector<ckpt::NamedTensor> named;
    for (const auto& [name, t] : tensors) named.push_back({name, &t});
    ASSERT_TRUE(
        ckpt::write_safetensors(path, named, {{kQuantizationMetadataKey, meta.dump()}}).ok());
  }

  // The load's error message; fails the test when it loads.
  std::string refusal() {
    Result<LoadedModel> r = load_hf_model(dir_);
    EXPECT_FALSE(r.ok()) << "the damaged model loaded";
    return r.ok() ? "" : r.status().message();
  }

  std::string dir_;
};

const std::string kQ = "model.layers.1.self_attn.q_proj.weight";

TEST_F(QuantizedModelDir, StoresTheCodesAndScalesQuantizingAtLoadBuilds) {
  FormatAssignment formats = uniform(ops::WeightFormat::kInt4, 32);
  formats["lm_head.weight"] = {ops::WeightFormat::kInt8, 64};
  formats[kQ] = {ops::WeightFormat::kBF16, 64};
  save(formats);
  auto original = make_model();
  const ckpt::SafetensorsFile file = take(ckpt::SafetensorsFile::open(dir_ + "/model.safetensors"));
  for (const auto& [name, o] : formats) {
    const model::Parameter& p =
        original->parameters()[take(original->parameter_index(name))];
    const ops::QuantizedMatrix want = take(ops::quantize_weights(
        p.value.data<float>(), p.global_shape[0], p.global_shape[1], o.format, o.group_size));
    const Tensor codes = take(file.read(name + ".qweight"));
    const auto* bytes = static_cast<const uint8_t*>(codes.raw_data());
    EXPECT_EQ(HugePageVector<uint8_t>(bytes, bytes + codes.nbytes()), want.values) << name;
    if (o.format == ops::WeightFormat::kBF16) {
      EXPECT_EQ(file.find(name + ".scales"), nullptr) << name;
      continue;
    }
    const Tensor scales = take(file.read(name + ".scales"));
    EXPECT_EQ(HugePageVector<float>(scales.data<float>(), scales.data<float>() + scales.numel()),
              want.scales)
        << name;
    EXPECT_EQ(file.find(name), nullptr) << name << " is stored in f32 as well";
  }
  EXPECT_NE(file.find("model.embed_tokens.weight"), nullptr);
}

struct RoundTripCase {
  const char* name;
  WeightOptions options;
};
void PrintTo(const RoundTripCase& c, std::ostream* os) { *os << c.name; }

class QuantizedRoundTrip : public QuantizedModelDir,
                           public ::testing::WithParamInterface<RoundTripCase> {};

// Tokens and logits equal exactly: same codes, same kernels.
TEST_P(QuantizedRoundTrip, ServesLikeQuantizingTheOriginalAtLoad) {
  const WeightOptions o = GetParam().options;
  save(uniform(o.format, o.group_size));
  LoadedModel loaded = take(load_hf_model(dir_));
  auto at_load = make_model();
  const ServingWeightStats want = take(quantize_for_serving(*at_load, o));
  EXPECT_EQ(loaded.serving_weights.matrices, want.matrices);
  EXPECT_EQ(loaded.serving_weights.quantized_bytes, want.quantized_bytes);
  for (size_t i : loaded.model->cached_linear_parameters()) {
    EXPECT_EQ(loaded.model->parameters()[i].value.raw_data(), nullptr);
  }
  const std::vector<Completion> got = generate(*loaded.model), ref = generate(*at_load);
  for (size_t r = 0; r < got.size(); ++r) {
    EXPECT_EQ(got[r].tokens, ref[r].tokens) << "request " << r;
    EXPECT_EQ(got[r].logits, ref[r].logits) << "request " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Infer, QuantizedRoundTrip,
                         ::testing::Values(RoundTripCase{"bf16", {ops::WeightFormat::kBF16, 64}},
                                           RoundTripCase{"int8", {ops::WeightFormat::kInt8, 64}},
                                           RoundTripCase{"int4_g32", {ops::WeightFormat::kInt4, 32}}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(QuantizedModelDir, DequantizedLoadHoldsTheDequantizedWeights) {
  save(uniform(ops::WeightFormat::kInt4, 32));
  LoadedModel loaded = take(load_quantized_model(dir_, {}, QuantizedValues::kDequantized));
  EXPECT_EQ(loaded.serving_weights.matrices, 0);
  auto original = make_model();
  const std::vector<size_t> linears = original->cached_linear_parameters();
  for (size_t i = 0; i < original->parameters().size(); ++i) {
    model::Parameter& want = original->parameters()[i];
    if (std::find(linears.begin(), linears.end(), i) != linears.end()) {
      const ops::QuantizedMatrix q =
          take(ops::quantize_weights(want.value.data<float>(), want.global_shape[0],
                                     want.global_shape[1], ops::WeightFormat::kInt4, 32));
      ops::dequantize_weights(q.view(), want.value.data<float>());
    }
    const Tensor& got = loaded.model->parameters()[i].value;
    ASSERT_EQ(got.numel(), want.value.numel());
    EXPECT_TRUE(std::equal(got.data<float>(), got.data<float>() + got.numel(),
                           want.value.data<float>()))
        << want.name;
  }
}

// A rank that holds part of the model (disaggregated serving) reads only its parameters.
TEST_F(QuantizedModelDir, KeepFilterReleasesTheParametersItRejects) {
  save(uniform(ops::WeightFormat::kInt8));
  const ParameterFilter keep = [](const model::Transformer& m, size_t i) {
    return m.parameters()[i].name.find("layers.1.") == std::string::npos;
  };
  LoadedModel loaded = take(load_quantized_model(dir_, keep));
  const std::vector<size_t> linear = loaded.model->cached_linear_parameters();
  EXPECT_EQ(loaded.serving_weights.matrices, static_cast<int64_t>(linear.size()) - 7);
  for (const model::Parameter& p : loaded.model->parameters()) {
    if (p.name.find("layers.1.") != std::string::npos) {
      EXPECT_EQ(p.value.raw_data(), nullptr) << p.name;
    }
  }
  EXPECT_NE(loaded.model->parameters()[0].value.raw_data(), nullptr);  // the embedding
}

TEST_F(QuantizedModelDir, RefusesScalesWhoseShapeDoesNotMatchTheGroupSize) {
  const std::string down = "model.layers.0.mlp.down_proj.weight";  // (32, 64)
  save(uniform(ops::WeightFormat::kInt4, 32));
  rewrite([&](auto&, nlohmann::json& meta) { meta["tensors"][down]["group_size"] = 64; });
  std::string m = refusal();
  EXPECT_NE(m.find(down + ".scales is F32 [32, 2]"), std::string::npos) << m;
  EXPECT_NE(m.find("F32 [32, 1]"), std::string::npos) << m;
  save(uniform(ops::WeightFormat::kInt8));
  rewrite([](std::map<std::string, Tensor>& t, auto&) {
    t[kQ + ".scales"] = Tensor::zeros(DType::kF32, {31});
  });
  m = refusal();
  EXPECT_NE(m.find(kQ + ".scales is F32 [31]"), std::string::npos) << m;
  // q_proj has 32 inputs, which groups of 64 do not divide.
  save(uniform(ops::WeightFormat::kInt4, 32));
  rewrite([](auto&, nlohmann::json& meta) { meta["tensors"][kQ]["group_size"] = 64; });
  m = refusal();
  EXPECT_NE(m.find(kQ), std::string::npos) << m;
}

TEST_F(QuantizedModelDir, RefusesAnUnknownFormat) {
  save(uniform(ops::WeightFormat::kInt8));
  rewrite([](auto&, nlohmann::json& meta) { meta["tensors"][kQ]["format"] = "int3"; });
  const std::string m = refusal();
  EXPECT_NE(m.find("int3"), std::string::npos) << m;
  EXPECT_NE(m.find(kQ), std::string::npos) << m;
}

TEST_F(QuantizedModelDir, RefusesMissingScales) {
  save(uniform(ops::WeightFormat::kInt8));
  rewrite([](std::map<std::string, Tensor>& t, auto&) { t.erase(kQ + ".scales"); });
  const std::string m = refusal();
  EXPECT_NE(m.find(kQ + ".scales is missing"), std::string::npos) << m;
}

TEST_F(QuantizedModelDir, RefusesCodesOutsideTheSymmetricRange) {
  save(uniform(ops::WeightFormat::kInt4, 32));
  rewrite([](std::map<std::string, Tensor>& t, auto&) {
    static_cast<uint8_t*>(t[kQ + ".qweight"].raw_data())[17] = 0x80;  // low nibble 0: q = -8
  });
  std::string m = refusal();
  EXPECT_NE(m.find(kQ + ".qweight"), std::string::npos) << m;
  EXPECT_NE(m.find("byte 17"), std::string::npos) << m;
  save(uniform(ops::WeightFormat::kInt8));
  rewrite([](std::map<std::string, Tensor>& t, auto&) {
    static_cast<uint8_t*>(t[kQ + ".qweight"].raw_data())[40] = 0x80;  // -128
  });
  m = refusal();
  EXPECT_NE(m.find("int8's [-127, 127]"), std::string::npos) << m;
}

TEST_F(QuantizedModelDir, RefusesATensorTheMetadataNamesButTheFileLacks) {
  save(uniform(ops::WeightFormat::kInt8));
  rewrite([](std::map<std::string, Tensor>& t, auto&) { t.erase(kQ + ".qweight"); });
  std::string m = refusal();
  EXPECT_NE(m.find(kQ + ".qweight is missing"), std::string::npos) << m;
  save(uniform(ops::WeightFormat::kInt8));
  rewrite([](auto&, nlohmann::json& meta) {
    meta["tensors"]["model.layers.7.mlp.up_proj.weight"] = meta["tensors"][kQ];
  });
  m = refusal();
  EXPECT_NE(m.find("model.layers.7.mlp.up_proj.weight which the model"), std::string::npos) << m;
}

TEST_F(QuantizedModelDir, RefusesAModelTensorNeitherStoredNorQuantized) {
  save(uniform(ops::WeightFormat::kInt8));
  rewrite([](auto&, nlohmann::json& meta) { meta["tensors"].erase(kQ); });
  const std::string m = refusal();
  EXPECT_NE(m.find(kQ + " is missing"), std::string::npos) << m;
}

TEST_F(QuantizedModelDir, RefusesToQuantizeANonLinearTensor) {
  auto m = make_model();
  const Status s = save_quantized_model(*m, {{"model.norm.weight", {ops::WeightFormat::kInt8, 64}}},
                                        gpt2_tokenizer(), dir_);
  EXPECT_NE(s.message().find("model.norm.weight is not a linear weight"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace ms::infer
