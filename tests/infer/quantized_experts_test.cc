// Quantized MoE experts in serving (issue 17 item 7): the routed experts' and the shared
// expert's gate/up/down are converted like every other linear weight, their f32 values
// released, and the cached forward multiplies by them through the hook (the training forward
// never calls it). Checked here: logits against an f32 model holding the same codes
// dequantized, and unlike one whose experts stay f32; the bytes released; the staged forward
// with the experts quantized on models that hold only some experts (what expert ranks hold)
// bitwise equal to the colocated one; a quantized directory of a MoE model holding the codes
// --weights builds and serving the same tokens, whole or filtered to one expert rank's share;
// the sensitivities the bit allocation weighs covering every expert; refusals naming the
// expert tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "ckpt/safetensors.h"
#include "core/philox.h"
#include "infer/bench.h"
#include "infer/engine.h"
#include "infer/kv_cache.h"
#include "infer/quant_sensitivity.h"
#include "infer/quantized_model.h"
#include "infer/serving.h"
#include "infer/serving_weights.h"
#include "tests/infer/test_models.h"
#include "tests/io/temp_dir.h"

namespace ms::infer {
namespace {

using testing::take;
using testing::gpt2_tokenizer;

// tiny_moe with widths groups of 32 divide (experts' d_ff 64, shared expert 32).
config::ModelConfig moe_int4() {
  config::ModelConfig c = testing::tiny_moe();
  c.d_ff = 64;
  c.moe.shared_expert_d_ff = 32;
  return c;
}

std::unique_ptr<model::Transformer> make_model(const config::ModelConfig& c = moe_int4()) {
  return take(model::Transformer::create(c, 21));
}

bool is_expert_weight(const model::Transformer& m, size_t i) {
  return m.routed_expert(i).has_value() ||
         m.parameters()[i].name.find("shared_expert.") != std::string::npos;
}

// Every cached-forward linear weight `which` accepts replaced, in f32, by its dequantized value.
void dequantize_where(model::Transformer& m, const WeightOptions& o,
                      const std::function<bool(size_t)>& which) {
  for (size_t i : m.cached_linear_parameters()) {
    if (!which(i)) continue;
    model::Parameter& p = m.parameters()[i];
    const ops::QuantizedMatrix q = take(ops::quantize_weights(
        p.value.data<float>(), p.global_shape[0], p.global_shape[1], o.format, o.group_size));
    ops::dequantize_weights(q.view(), p.value.data<float>());
  }
}

const std::vector<int32_t> kPrompt = {5, 17, 3, 90, 41, 8, 66, 12, 30};
const std::vector<int32_t> kBlocks = {0, 1, 2};

// Every token's logits of one prefill of kPrompt, (9, vocab).
std::vector<float> prefill_logits(model::Transformer& m) {
  KvCache cache(m.config(), 4, 4);
  const model::CachedChunk chunk{kPrompt, 0, kBlocks, 0, true};
  const Tensor t = take(m.forward_cached({&chunk, 1}, cache.view()));
  return {t.data<float>(), t.data<float>() + t.numel()};
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// The tests compare with dequantized f32 weights to float rounding, so the kernels multiply f32
// activations (int8 ones: serving_weights_test).
constexpr ops::ActivationFormat kF32Activations = ops::ActivationFormat::kF32;

struct Format {
  const char* name;
  WeightOptions options;
};
void PrintTo(const Format& f, std::ostream* os) { *os << f.name; }

class QuantizedExperts : public ::testing::TestWithParam<Format> {};

TEST_P(QuantizedExperts, LogitsEqualTheDequantizedExpertsAndNotTheF32Ones) {
  const WeightOptions o = GetParam().options;
  auto served = make_model(), dequantized = make_model(), f32_experts = make_model();
  const ServingWeightStats stats = take(quantize_for_serving(*served, o));
  EXPECT_EQ(stats.matrices, static_cast<int64_t>(served->cached_linear_parameters().size()));
  int64_t experts = 0;
  for (size_t i : served->cached_linear_parameters()) {
    if (!is_expert_weight(*served, i)) continue;
    ++experts;
    EXPECT_EQ(served->parameters()[i].value.raw_data(), nullptr)
        << served->parameters()[i].name << " still holds its f32 value";
  }
  const config::ModelConfig c = moe_int4();
  EXPECT_EQ(experts, c.n_layers * 3 * (c.moe.num_experts + 1));  // routed and shared
  for (size_t l = 0; l < static_cast<size_t>(c.n_layers); ++l) {
    for (int64_t e = 0; e < c.moe.num_experts; ++e) EXPECT_TRUE(served->holds_expert(l, e));
  }
  dequantize_where(*dequantized, o, [](size_t) { return true; });
  dequantize_where(*f32_experts, o, [&](size_t i) { return !is_expert_weight(*f32_experts, i); });
  const std::vector<float> got = prefill_logits(*served);
  const double to_dequantized = max_rel_diff(got, prefill_logits(*dequantized));
  const double to_f32_experts = max_rel_diff(got, prefill_logits(*f32_experts));
  std::printf("%s: max relative logit difference %.2e to the dequantized model, %.2e to f32 "
              "experts\n", GetParam().name, to_dequantized, to_f32_experts);
  EXPECT_LE(to_dequantized, 1e-5) << GetParam().name;
  // The experts' quantization error is visible, so they did go through the quantized weights.
  EXPECT_GT(to_f32_experts, 20 * to_dequantized) << GetParam().name;
}

TEST_P(QuantizedExperts, ReleasesTheExpertsBytes) {
  const WeightOptions o = GetParam().options;
  auto m = make_model();
  int64_t f32_held = 0, linear_elements = 0, linear_rows = 0, expert_bytes = 0;
  for (size_t i = 0; i < m->parameters().size(); ++i) {
    f32_held += static_cast<int64_t>(m->parameters()[i].value.nbytes());
  }
  for (size_t i : m->cached_linear_parameters()) {
    const Tensor& v = m->parameters()[i].value;
    linear_elements += v.numel();
    linear_rows += v.shape()[0];
    if (is_expert_weight(*m, i)) expert_bytes += static_cast<int64_t>(v.nbytes());
  }
  const ServingWeightStats stats = take(quantize_for_serving(*m, o));
  int64_t still_f32 = 0;
  for (const model::Parameter& p : m->parameters()) {
    still_f32 += static_cast<int64_t>(p.value.nbytes());
  }
  EXPECT_EQ(stats.f32_bytes, 4 * linear_elements);
  EXPECT_EQ(still_f32, f32_held - stats.f32_bytes);  // the embedding, norms, routers
  EXPECT_GT(expert_bytes, stats.f32_bytes / 2);      // most of this model's linear bytes
  const int64_t want = o.format == ops::WeightFormat::kInt8
                           ? linear_elements + 4 * linear_rows
                           : linear_elements / 2 + 4 * (linear_elements / o.group_size);
  EXPECT_EQ(stats.quantized_bytes, want);
  std::printf("%s: %lld bytes of linear weights as f32 -> %lld (x%.2f); held %lld -> %lld\n",
              GetParam().name, static_cast<long long>(stats.f32_bytes),
              static_cast<long long>(stats.quantized_bytes),
              static_cast<double>(stats.f32_bytes) / static_cast<double>(stats.quantized_bytes),
              static_cast<long long>(f32_held),
              static_cast<long long>(still_f32 + stats.quantized_bytes));
}

// The bandwidth bound of ms-infer bench: a decoded token reads top_k of the quantized experts.
TEST_P(QuantizedExperts, DecodeBytesCountTheActiveQuantizedExperts) {
  const WeightOptions o = GetParam().options;
  LoadedModel served;
  served.model = make_model();
  const config::ModelConfig c = moe_int4();
  const double share = static_cast<double>(c.moe.top_k) / static_cast<double>(c.moe.num_experts);
  const std::vector<size_t> linear = served.model->cached_linear_parameters();
  double want = 0;
  for (size_t i = 1; i < served.model->parameters().size(); ++i) {  // 0: the embedding
    const model::Parameter& p = served.model->parameters()[i];
    const int64_t rows = p.global_shape[0], elements = p.value.numel();
    double bytes = 4.0 * static_cast<double>(elements);
    if (std::find(linear.begin(), linear.end(), i) != linear.end()) {
      bytes = o.format == ops::WeightFormat::kInt8
                  ? static_cast<double>(elements + 4 * rows)
                  : static_cast<double>(elements / 2 + 4 * (elements / o.group_size));
    }
    want += served.model->routed_expert(i) ? share * bytes : bytes;
  }
  served.serving_weights = take(quantize_for_serving(*served.model, o));
  EXPECT_GT(served.serving_weights.routed_quantized_bytes, 0);
  EXPECT_NEAR(decode_weight_bytes(served), want, 1e-9 * want);
}

// Attention ranks hold everything but the routed experts; two expert models hold experts
// {0, 1} and {2, 3}; each converts only what it holds. The staged pass over them equals the
// colocated quantized forward_cached bitwise.
TEST_P(QuantizedExperts, ExpertsQuantizedOnTheirOwnRanksEqualColocated) {
  const WeightOptions o = GetParam().options;
  const config::ModelConfig c = moe_int4();
  auto whole = make_model(), front = make_model(), low = make_model(), high = make_model();
  const auto expert_in = [](model::Transformer& m, int64_t lo, int64_t hi) {
    m.release_for_serving([&](size_t i) {
      const auto e = m.routed_expert(i);
      return e.has_value() && e->expert >= lo && e->expert < hi;
    });
  };
  front->release_for_serving([&](size_t i) { return !front->routed_expert(i).has_value(); });
  expert_in(*low, 0, 2);
  expert_in(*high, 2, 4);
  const int64_t linear = static_cast<int64_t>(whole->cached_linear_parameters().size());
  const int64_t routed = c.n_layers * 3 * c.moe.num_experts;
  EXPECT_EQ(take(quantize_for_serving(*whole, o)).matrices, linear);
  EXPECT_EQ(take(quantize_for_serving(*front, o)).matrices, linear - routed);
  EXPECT_EQ(take(quantize_for_serving(*low, o)).matrices, routed / 2);
  EXPECT_EQ(take(quantize_for_serving(*high, o)).matrices, routed / 2);
  EXPECT_TRUE(low->holds_expert(1, 1));
  EXPECT_FALSE(low->holds_expert(1, 2));
  EXPECT_FALSE(front->holds_expert(0, 0));

  const std::vector<float> want = prefill_logits(*whole);
  KvCache cache(c, 4, 4);
  const model::CachedChunk chunk{kPrompt, 0, kBlocks, 0, true};
  model::CachedPass pass = take(front->begin_cached({&chunk, 1}, cache.view()));
  const int64_t D = c.d_model;
  for (front->run_to_experts(pass); !pass.finished(); front->run_to_experts(pass)) {
    const std::span<const int64_t> off = pass.dispatch_offsets();
    const float* x = pass.dispatch_rows().data();
    std::vector<float> out(pass.dispatch_rows().size());
    // Each expert model sees only its experts' rows, offsets from 0.
    const std::vector<int64_t> low_off = {0, off[1], off[2], off[2], off[2]};
    const std::vector<int64_t> high_off = {0, 0, 0, off[3] - off[2], off[4] - off[2]};
    ASSERT_TRUE(low->run_experts(pass.layer(), low_off, x, out.data()).ok());
    const Status s = high->run_experts(pass.layer(), high_off, x + off[2] * D,
                                       out.data() + off[2] * D);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(front->apply_experts(pass, out).ok());
  }
  const Tensor got = take(front->cached_logits(pass));
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), got.data<float>()));
}

INSTANTIATE_TEST_SUITE_P(Infer, QuantizedExperts,
                         ::testing::Values(Format{"int8", {ops::WeightFormat::kInt8, 64, kF32Activations}},
                                           Format{"int4_g32", {ops::WeightFormat::kInt4, 32, kF32Activations}}),
                         [](const auto& info) { return std::string(info.param.name); });

// The hook serves the cached forward only: the training forward reads the f32 values.
TEST(QuantizedExpertsHook, TrainingForwardNeverCallsTheHook) {
  auto m = make_model();
  std::set<size_t> called;
  m->set_cached_linear([&](ops::Backend&, std::span<const model::CachedLinearOut> outs, const float*, int64_t) {
    for (const model::CachedLinearOut& o : outs) called.insert(o.param_index);
    return false;  // the f32 weights compute
  });
  const std::vector<int32_t> tokens(kPrompt.begin(), kPrompt.begin() + 8);
  take(m->forward_logits(tokens.data(), 1, 8));
  EXPECT_TRUE(called.empty());
  prefill_logits(*m);
  std::set<std::string> kinds;
  for (size_t i : called) {
    if (is_expert_weight(*m, i)) kinds.insert(m->routed_expert(i) ? "routed" : "shared");
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"routed", "shared"}));
}

// Layers that read one input reach the hook in one call, q, k and v together and each MLP's
// gate and up together, so a quantized hook quantizes that input once and hands the pool one
// region; a layer the hook does not answer for breaks its group into single calls.
TEST(QuantizedExpertsHook, LayersThatReadOneInputComeInOneCall) {
  auto m = make_model();
  const auto names_of = [&](std::span<const model::CachedLinearOut> outs) {
    std::vector<std::string> names;
    for (const model::CachedLinearOut& o : outs) {
      const std::string& name = m->parameters()[o.param_index].name;
      names.push_back(name.substr(name.rfind('.', name.size() - 8) + 1));
    }
    return names;
  };
  std::vector<std::vector<std::string>> calls;
  const auto record = [&](ops::Backend&, std::span<const model::CachedLinearOut> outs, const float*, int64_t) {
    calls.push_back(names_of(outs));
    return false;  // the f32 weights compute
  };
  const std::vector<size_t> all = m->cached_linear_parameters();
  m->set_cached_linear(record, all);
  const std::vector<float> f32 = prefill_logits(*m);
  const std::vector<std::string> qkv = {"q_proj.weight", "k_proj.weight", "v_proj.weight"};
  int64_t qkv_calls = 0, pair_calls = 0;
  for (const std::vector<std::string>& call : calls) {
    if (call.size() == 3) {
      EXPECT_EQ(call, qkv);
      ++qkv_calls;
    } else if (call.size() == 2) {
      // The dense FFN's and the shared expert's names, or a routed expert's.
      const bool named = call == std::vector<std::string>{"gate_proj.weight", "up_proj.weight"} ||
                         call == std::vector<std::string>{"w1.weight", "w3.weight"};
      EXPECT_TRUE(named) << call[0] << ", " << call[1];
      ++pair_calls;
    }
  }
  EXPECT_EQ(qkv_calls, m->config().n_layers);
  EXPECT_GT(pair_calls, 0);

  // Without k in the hook's list, every call is one layer, and the logits do not change.
  std::vector<size_t> without_k;
  for (size_t i : all) {
    if (m->parameters()[i].name.find("k_proj") == std::string::npos) without_k.push_back(i);
  }
  calls.clear();
  m->set_cached_linear(record, without_k);
  EXPECT_EQ(prefill_logits(*m), f32);
  for (const std::vector<std::string>& call : calls) {
    if (call[0].find("_proj") == 1) {
      EXPECT_EQ(call.size(), 1u) << call[0];
    }
  }
}

TEST(QuantizedExpertsRefusal, NamesTheExpertTensorAndLeavesTheModel) {
  const auto refusal = [](const config::ModelConfig& c) {
    auto m = make_model(c);
    const Result<ServingWeightStats> r =
        quantize_for_serving(*m, {ops::WeightFormat::kInt4, 32});
    EXPECT_FALSE(r.ok());
    for (const model::Parameter& p : m->parameters()) {
      EXPECT_NE(p.value.raw_data(), nullptr) << p.name << " released by a refusal";
    }
    return r.status().message();
  };
  config::ModelConfig routed = testing::tiny_moe();  // d_ff 48: groups of 32 do not divide it
  routed.moe.shared_expert_d_ff = 0;
  std::string m = refusal(routed);
  EXPECT_NE(m.find("model.layers.0.block_sparse_moe.experts.0.w2.weight"), std::string::npos)
      << m;
  config::ModelConfig shared = moe_int4();
  shared.moe.shared_expert_d_ff = 16;
  m = refusal(shared);
  EXPECT_NE(m.find("model.layers.0.mlp.shared_expert.down_proj.weight"), std::string::npos) << m;
}

// Sensitivities (ms-infer quantize --memory-budget) cover each expert weight as a candidate.
TEST(QuantizedExpertsAllocation, EveryExpertWeightIsMeasured) {
  auto m = make_model();
  TokenWindows w;
  w.seq_len = 8;
  for (int64_t i = 0; i < 2 * 9; ++i) {
    w.tokens.push_back(static_cast<int32_t>(uniform(5, 0, static_cast<uint64_t>(i)) * 95.0f));
  }
  const KlReference ref = take(KlReference::create(*m, w));
  const std::vector<AllocationItem> items = take(measure_sensitivity(*m, ref));
  std::set<std::string> measured;
  for (const AllocationItem& item : items) {
    for (const AllocationChoice& choice : item.choices) {
      if (format_label(choice.format) == "int8") {
        EXPECT_GT(choice.error, 0.0) << item.name;
        measured.insert(item.name);
      }
    }
  }
  int64_t experts = 0;
  for (size_t i : m->cached_linear_parameters()) {
    if (!is_expert_weight(*m, i)) continue;
    ++experts;
    EXPECT_EQ(measured.count(m->parameters()[i].name), 1u) << m->parameters()[i].name;
  }
  EXPECT_EQ(experts, 2 * 3 * 5);
}

config::ModelConfig gpt2_moe() {
  config::ModelConfig c = moe_int4();
  c.vocab_size = 50304;  // the tokenizer's
  return c;
}

std::vector<Completion> greedy(model::Transformer& m) {
  std::vector<Request> reqs;
  for (int64_t i = 0; i < 3; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    for (int64_t t = 0; t < 2 + 5 * i; ++t) {
      r.prompt.push_back(static_cast<int32_t>(
          uniform(static_cast<uint64_t>(40 + i), 2, static_cast<uint64_t>(t)) * 50000.0f));
    }
    r.max_tokens = 5;
    reqs.push_back(r);
  }
  EngineOptions o;
  o.stop_at_eos = false;
  o.keep_logits = true;
  std::unique_ptr<Engine> engine = take(Engine::create(m, nullptr, o));
  return take(engine->generate(reqs));
}

class QuantizedExpertsDir : public ::testing::TestWithParam<Format> {
 protected:
  io::testing::TempDir tmp_;
  const std::string dir_ = tmp_.path();
};

TEST_P(QuantizedExpertsDir, RoundTripsTheExpertCodesAndServesLikeAtLoad) {
  const WeightOptions o = GetParam().options;
  auto original = make_model(gpt2_moe());
  ASSERT_TRUE(
      save_quantized_model(*original, uniform_assignment(*original, o), gpt2_tokenizer(), dir_)
          .ok());
  // The file holds the codes and scales quantize_weights builds, for every expert weight.
  const ckpt::SafetensorsFile file = take(ckpt::SafetensorsFile::open(dir_ + "/model.safetensors"));
  int64_t expert_tensors = 0;
  for (size_t i : original->cached_linear_parameters()) {
    const model::Parameter& p = original->parameters()[i];
    if (!is_expert_weight(*original, i)) continue;
    ++expert_tensors;
    const ops::QuantizedMatrix q = take(ops::quantize_weights(
        p.value.data<float>(), p.global_shape[0], p.global_shape[1], o.format, o.group_size));
    const Tensor codes = take(file.read(p.name + ".qweight"));
    const auto* bytes = static_cast<const uint8_t*>(codes.raw_data());
    EXPECT_TRUE(std::equal(q.values.begin(), q.values.end(), bytes)) << p.name;
    const Tensor scales = take(file.read(p.name + ".scales"));
    EXPECT_TRUE(std::equal(q.scales.begin(), q.scales.end(), scales.data<float>())) << p.name;
  }
  EXPECT_EQ(expert_tensors, 2 * 3 * 5);
  LoadedModel loaded = take(load_hf_model(dir_));
  const ServingWeightStats at_load = take(quantize_for_serving(*original, o));
  EXPECT_EQ(loaded.serving_weights.matrices, at_load.matrices);
  EXPECT_EQ(loaded.serving_weights.quantized_bytes, at_load.quantized_bytes);
  const std::vector<Completion> got = greedy(*loaded.model), want = greedy(*original);
  for (size_t r = 0; r < got.size(); ++r) {
    EXPECT_EQ(got[r].tokens, want[r].tokens) << "request " << r;
    EXPECT_EQ(got[r].logits, want[r].logits) << "request " << r;
  }
}

// An expert rank of disaggregated serving (rank 2 of 3, one attention rank) reads only its
// experts' codes from the directory; the attention rank none.
TEST_P(QuantizedExpertsDir, ExpertRankLoadsOnlyItsExperts) {
  const WeightOptions o = GetParam().options;
  auto original = make_model(gpt2_moe());
  ASSERT_TRUE(
      save_quantized_model(*original, uniform_assignment(*original, o), gpt2_tokenizer(), dir_)
          .ok());
  ServeOptions serve;
  serve.attention_ranks = 1;
  const config::ModelConfig c = gpt2_moe();
  LoadedModel experts = take(load_quantized_model(dir_, serving_filter(serve, 2, 3)));
  EXPECT_EQ(experts.serving_weights.matrices, c.n_layers * 3 * 2);  // experts 2 and 3
  for (size_t l = 0; l < static_cast<size_t>(c.n_layers); ++l) {
    for (int64_t e = 0; e < c.moe.num_experts; ++e) {
      EXPECT_EQ(experts.model->holds_expert(l, e), e >= 2) << "layer " << l << " expert " << e;
    }
  }
  for (const model::Parameter& p : experts.model->parameters()) {
    EXPECT_EQ(p.value.raw_data(), nullptr) << p.name << " held in f32 on an expert rank";
  }
  LoadedModel attention = take(load_quantized_model(dir_, serving_filter(serve, 0, 3)));
  const int64_t linear = static_cast<int64_t>(attention.model->cached_linear_parameters().size());
  EXPECT_EQ(attention.serving_weights.matrices, linear - c.n_layers * 3 * c.moe.num_experts);
  for (size_t l = 0; l < static_cast<size_t>(c.n_layers); ++l) {
    EXPECT_FALSE(attention.model->holds_expert(l, 0));
  }
}

INSTANTIATE_TEST_SUITE_P(Infer, QuantizedExpertsDir,
                         ::testing::Values(Format{"int8", {ops::WeightFormat::kInt8, 64}},
                                           Format{"int4_g32", {ops::WeightFormat::kInt4, 32}}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ms::infer
