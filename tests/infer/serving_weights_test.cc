// Serving with converted weights (infer/serving_weights.h): the cached forward of a converted
// model equals that of an f32 model holding the dequantized weights, for every format, dense
// and MoE (so every linear layer goes through the hook and only those); converted weights are
// released and counted; refusals leave the model as it was; and greedy bf16 decoding of the
// tiny model ms_infer_make_tiny_model writes agrees with f32 on most tokens (rate printed).
#include "infer/serving_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/philox.h"
#include "infer/engine.h"
#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

using testing::take;

std::unique_ptr<model::Transformer> make_model(const config::ModelConfig& c, uint64_t seed = 7) {
  return take(model::Transformer::create(c, seed));
}

std::vector<Request> greedy_requests(int64_t vocab, int64_t count, int64_t max_tokens) {
  std::vector<Request> reqs;
  for (int64_t i = 0; i < count; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    const int64_t len = 1 + (i * 7) % 13;
    for (int64_t t = 0; t < len; ++t) {
      r.prompt.push_back(static_cast<int32_t>(
          uniform(static_cast<uint64_t>(500 + i), 3, static_cast<uint64_t>(t)) *
          static_cast<float>(vocab - 1)));
    }
    r.max_tokens = max_tokens;
    reqs.push_back(r);
  }
  return reqs;
}

std::vector<Completion> generate(model::Transformer& m, const std::vector<Request>& reqs) {
  EngineOptions o;
  o.stop_at_eos = false;
  o.keep_logits = true;
  std::unique_ptr<Engine> engine = take(Engine::create(m, nullptr, o));
  return take(engine->generate(reqs));
}

// Replaces, in f32, every weight quantize_for_serving would convert by its dequantized value.
void load_dequantized(model::Transformer& m, const WeightOptions& options) {
  for (size_t i : m.cached_linear_parameters()) {
    model::Parameter& p = m.parameters()[i];
    const int64_t rows = p.value.shape()[0], cols = p.value.shape()[1];
    ops::QuantizedMatrix q = take(ops::quantize_weights(p.value.data<float>(), rows, cols,
                                                        options.format, options.group_size));
    ops::dequantize_weights(q.view(), p.value.data<float>());
  }
}

// tiny_dense with an FFN width that groups of 32 divide (int4 needs it of d_ff too).
config::ModelConfig tiny_dense_int4() {
  config::ModelConfig c = testing::tiny_dense();
  c.d_ff = 64;
  return c;
}

// tiny_moe likewise: the experts' and the shared expert's widths too.
config::ModelConfig tiny_moe_int4() {
  config::ModelConfig c = tiny_dense_int4();
  c.moe = testing::tiny_moe().moe;
  c.moe.shared_expert_d_ff = 32;
  return c;
}

struct FormatCase {
  const char* name;
  WeightOptions options;
  config::ModelConfig (*model)();
};
void PrintTo(const FormatCase& c, std::ostream* os) { *os << c.name; }

// f32 activations: the kernels then compute what the dequantized weights do, to float rounding
// (int8 activations: Int8ActivationsTest below).
constexpr ops::ActivationFormat kF32Act = ops::ActivationFormat::kF32;
const FormatCase kFormatCases[] = {
    {"bf16_dense", {ops::WeightFormat::kBF16, 64, kF32Act}, testing::tiny_dense},
    {"int8_dense", {ops::WeightFormat::kInt8, 64, kF32Act}, testing::tiny_dense},
    {"int4_g32_dense", {ops::WeightFormat::kInt4, 32, kF32Act}, tiny_dense_int4},
    {"int8_window_parallel_tied", {ops::WeightFormat::kInt8, 64, kF32Act},
     testing::tiny_window_parallel_tied},
    {"int8_moe", {ops::WeightFormat::kInt8, 64, kF32Act}, testing::tiny_moe},
    {"int4_g32_moe", {ops::WeightFormat::kInt4, 32, kF32Act}, tiny_moe_int4},
};

class ServingWeightsTest : public ::testing::TestWithParam<FormatCase> {};

TEST_P(ServingWeightsTest, ConvertedModelComputesWithTheDequantizedWeights) {
  const FormatCase& c = GetParam();
  const config::ModelConfig cfg = c.model();
  auto served = make_model(cfg), reference = make_model(cfg);
  load_dequantized(*reference, c.options);
  const ServingWeightStats stats = take(quantize_for_serving(*served, c.options));
  EXPECT_EQ(stats.matrices, static_cast<int64_t>(served->cached_linear_parameters().size()));
  for (size_t i : served->cached_linear_parameters()) {
    EXPECT_EQ(served->parameters()[i].value.raw_data(), nullptr)
        << served->parameters()[i].name << " still holds its f32 value";
  }
  const std::vector<Request> reqs = greedy_requests(cfg.vocab_size, 4, 6);
  const std::vector<Completion> got = generate(*served, reqs), want = generate(*reference, reqs);
  for (size_t r = 0; r < reqs.size(); ++r) {
    ASSERT_EQ(got[r].tokens, want[r].tokens) << c.name << " request " << r;
    for (size_t t = 0; t < got[r].logits.size(); ++t) {
      double diff = 0, scale = 1e-30;
      for (size_t v = 0; v < got[r].logits[t].size(); ++v) {
        diff = std::max(diff, std::fabs(double{got[r].logits[t][v]} - want[r].logits[t][v]));
        scale = std::max(scale, std::fabs(double{want[r].logits[t][v]}));
      }
      EXPECT_LE(diff / scale, 1e-4) << c.name << " request " << r << " step " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Infer, ServingWeightsTest, ::testing::ValuesIn(kFormatCases),
                         [](const auto& info) { return std::string(info.param.name); });

// A dense model whose every linear input is a multiple of 64 wide, so int8 activations apply to
// every matrix (ops/quant_act.h).
config::ModelConfig dense_64() {
  config::ModelConfig c = testing::tiny_dense();
  c.d_model = 64;
  c.d_ff = 128;
  return c;
}

// Max |a - b| over max |b| across the logits of every step up to the first token the two
// generations differ in (after it they continue different texts).
double max_rel_logit_diff(const std::vector<Completion>& a, const std::vector<Completion>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t r = 0; r < a.size(); ++r) {
    for (size_t t = 0; t < std::min(a[r].logits.size(), b[r].logits.size()); ++t) {
      if (t > 0 && a[r].tokens[t - 1] != b[r].tokens[t - 1]) break;
      for (size_t v = 0; v < a[r].logits[t].size(); ++v) {
        diff = std::max(diff, std::fabs(double{a[r].logits[t][v]} - b[r].logits[t][v]));
        scale = std::max(scale, std::fabs(double{b[r].logits[t][v]}));
      }
    }
  }
  return diff / scale;
}

// With int8 activations (the default) the served logits move from the dequantized model's by
// the activations' rounding: visibly (so the integer kernels ran), and by about what rounding 64
// values to 8 bits gives, well under the weights' own quantization error.
TEST(Int8ActivationsTest, ServeWithinTheActivationRoundingOfTheDequantizedModel) {
  const config::ModelConfig cfg = dense_64();
  for (const WeightOptions& o : {WeightOptions{ops::WeightFormat::kInt8, 64},
                                 WeightOptions{ops::WeightFormat::kInt4, 64}}) {
    ASSERT_EQ(o.activations, ops::ActivationFormat::kInt8);
    const std::string name(ops::weight_format_name(o.format));
    auto int8_act = make_model(cfg), f32_act = make_model(cfg), f32 = make_model(cfg);
    take(quantize_for_serving(*int8_act, o));
    WeightOptions f32_options = o;
    f32_options.activations = ops::ActivationFormat::kF32;
    take(quantize_for_serving(*f32_act, f32_options));
    std::vector<Request> reqs = greedy_requests(cfg.vocab_size, 4, 6);
    const std::vector<Completion> got = generate(*int8_act, reqs);
    const std::vector<Completion> f32_activations = generate(*f32_act, reqs);
    const double to_f32_activations = max_rel_logit_diff(got, f32_activations);
    const double weights_error = max_rel_logit_diff(f32_activations, generate(*f32, reqs));
    std::printf("%s weights: max relative logit difference %.2e from f32 activations; the "
                "weights' own quantization %.2e\n",
                name.c_str(), to_f32_activations, weights_error);
    EXPECT_GT(to_f32_activations, 1e-6) << name;
    EXPECT_LT(to_f32_activations, 2e-2) << name;
    if (o.format == ops::WeightFormat::kInt4) {
      EXPECT_LT(to_f32_activations, weights_error) << name;
    }
  }
}

TEST(ServingWeightsStatsTest, CountsTheBytesOfEachFormat) {
  const config::ModelConfig cfg = tiny_dense_int4();
  int64_t f32_bytes = 0, elements = 0, rows = 0;
  {
    auto m = make_model(cfg);
    for (size_t i : m->cached_linear_parameters()) {
      const Tensor& v = m->parameters()[i].value;
      f32_bytes += static_cast<int64_t>(v.nbytes());
      elements += v.numel();
      rows += v.shape()[0];
    }
  }
  const auto converted = [&](ops::WeightFormat f, int64_t group) {
    auto m = make_model(cfg);
    return take(quantize_for_serving(*m, {f, group}));
  };
  const ServingWeightStats bf16 = converted(ops::WeightFormat::kBF16, 64);
  EXPECT_EQ(bf16.f32_bytes, f32_bytes);
  EXPECT_EQ(bf16.quantized_bytes, 2 * elements);
  EXPECT_EQ(converted(ops::WeightFormat::kInt8, 64).quantized_bytes, elements + 4 * rows);
  EXPECT_EQ(converted(ops::WeightFormat::kInt4, 32).quantized_bytes,
            elements / 2 + 4 * (elements / 32));
  EXPECT_EQ(converted(ops::WeightFormat::kF32, 64).matrices, 0);
}

TEST(ServingWeightsStatsTest, RefusalNamesTheTensorAndLeavesTheModelAsItWas) {
  auto m = make_model(testing::tiny_dense());  // d_model 32: groups of 64 do not divide it
  const Result<ServingWeightStats> r = quantize_for_serving(*m, {ops::WeightFormat::kInt4, 64});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("q_proj"), std::string::npos) << r.status().message();
  for (const model::Parameter& p : m->parameters()) EXPECT_NE(p.value.raw_data(), nullptr);
  const Status bad = check_weight_options({ops::WeightFormat::kInt4, 48});
  EXPECT_NE(bad.message().find("--group-size 48"), std::string::npos) << bad.message();
  EXPECT_TRUE(check_weight_options({ops::WeightFormat::kInt8, 48}).ok());
}

// The model ms_infer_make_tiny_model writes by default (vocab 50304, d_model 64, 2 layers).
config::ModelConfig make_tiny_model_config() {
  config::ModelConfig c;
  c.vocab_size = 50304;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 128;
  c.max_seq_len = 256;
  return c;
}

// Tokens of `got` equal to `want` up to each request's first difference (greedy sequences
// diverge after it), over all of `want`'s tokens.
double greedy_match_rate(const std::vector<Completion>& want, const std::vector<Completion>& got) {
  int64_t matched = 0, total = 0;
  for (size_t r = 0; r < want.size(); ++r) {
    total += static_cast<int64_t>(want[r].tokens.size());
    const auto first_diff = std::mismatch(want[r].tokens.begin(), want[r].tokens.end(),
                                          got[r].tokens.begin(), got[r].tokens.end());
    matched += first_diff.first - want[r].tokens.begin();
  }
  return static_cast<double>(matched) / static_cast<double>(total);
}

// bf16 must agree on at least 90% of the tokens; int8 and int4 are printed for the record.
TEST(ServingWeightsGreedyTest, Bf16AgreesWithF32OnMostGreedyTokens) {
  const config::ModelConfig cfg = make_tiny_model_config();
  const std::vector<Request> reqs = greedy_requests(cfg.vocab_size, 8, 16);
  auto f32 = make_model(cfg, 1);
  const std::vector<Completion> want = generate(*f32, reqs);
  const WeightOptions formats[] = {{ops::WeightFormat::kBF16, 64},
                                   {ops::WeightFormat::kInt8, 64},
                                   {ops::WeightFormat::kInt4, 64}};
  for (const WeightOptions& o : formats) {
    auto served = make_model(cfg, 1);
    take(quantize_for_serving(*served, o));
    const double rate = greedy_match_rate(want, generate(*served, reqs));
    std::printf("%s vs f32 greedy on the make_tiny_model model: match rate %.3f (%zu prompts)\n",
                std::string(ops::weight_format_name(o.format)).c_str(), rate, reqs.size());
    if (o.format == ops::WeightFormat::kBF16) {
      EXPECT_GE(rate, 0.9);
    }
  }
}

}  // namespace
}  // namespace ms::infer
