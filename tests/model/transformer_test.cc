// The Transformer as a whole: every parameter gradient against central differences of the
// double-precision reference model (tests/model/reference_model.h) for a dense, an MoE (with a
// shared expert), a parallel-block and a sliding-window config, and with document masking
// (per-document positions, with a window); bitwise determinism; gradient
// accumulation; backward hooks; parameter names, initialization and counts; and the refusal of
// bad configs and bad batches.
//
// Gradient tolerance: the analytic fp32 gradient of each element must match the double central
// difference (step 1e-5, routing frozen) within 1e-3 of the largest gradient magnitude of its
// tensor (or 1e-6 absolute, whichever is larger). fp32 accumulation over these tiny sizes
// keeps the observed error around 1e-5 relative, so a wrong term (a missing residual, a
// dropped aux gradient, a transposed weight) fails by orders of magnitude.
#include "model/transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/philox.h"
#include "tests/model/reference_model.h"

namespace ms::model {
namespace {

config::ModelConfig tiny_dense() {
  config::ModelConfig c;
  c.vocab_size = 23;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  c.max_seq_len = 16;
  c.rope_theta = 100.0;
  return c;
}

config::ModelConfig tiny_moe() {
  config::ModelConfig c = tiny_dense();
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.aux_loss_coef = 0.05;
  c.moe.shared_expert_d_ff = 12;
  c.d_ff = 12;
  return c;
}

config::ModelConfig tiny_parallel_tied() {
  config::ModelConfig c = tiny_dense();
  c.parallel_block = true;
  c.tie_embeddings = true;
  return c;
}

config::ModelConfig tiny_window() {
  config::ModelConfig c = tiny_dense();
  c.sliding_window = 3;
  c.n_kv_heads = 1;
  return c;
}

struct Batch {
  int64_t B = 2, T = 7;
  std::vector<int32_t> inputs, targets;
};

Batch make_batch(int64_t vocab, uint64_t seed) {
  Batch b;
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < b.B * b.T; ++i) {
    b.inputs.push_back(static_cast<int32_t>(rng() % vocab));
    b.targets.push_back(static_cast<int32_t>(rng() % vocab));
  }
  return b;
}

std::unique_ptr<Transformer> make_model(const config::ModelConfig& c, uint64_t seed = 7) {
  auto model = Transformer::create(c, seed);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return std::move(model).value();
}

// Larger weights than the 0.02 initialization, so the check exercises the nonlinearities.
void randomize(Transformer& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (Parameter& p : m.parameters()) {
    const bool norm = !p.weight_decay;
    for (float& v : p.value.span<float>()) v = norm ? 1.0f + 0.2f * normal(rng) : normal(rng);
  }
}

// Up to `count` element indices of a tensor of n elements, spread deterministically.
std::vector<int64_t> sample_indices(int64_t n, int64_t count, uint64_t seed) {
  if (n <= count) {
    std::vector<int64_t> all(n);
    for (int64_t i = 0; i < n; ++i) all[i] = i;
    return all;
  }
  std::mt19937_64 rng(seed);
  std::set<int64_t> picked;
  while (static_cast<int64_t>(picked.size()) < count) picked.insert(static_cast<int64_t>(rng() % n));
  return {picked.begin(), picked.end()};
}

// Rows of several documents: row 0 ends documents at positions 2, 3 (a one-token document) and
// 5, row 1 at position 4.
Batch with_documents(Batch b, int32_t eod) {
  for (int64_t at : {2, 3, 5}) b.inputs[at] = eod;
  b.inputs[b.T + 4] = eod;
  return b;
}

void check_gradients(const config::ModelConfig& c, const DocumentMask& docs = {}) {
  auto model = make_model(c);
  randomize(*model, 11);
  ASSERT_TRUE(model->set_document_mask(docs).ok());
  const Batch batch = docs.enabled ? with_documents(make_batch(c.vocab_size, 5), docs.eod_id)
                                   : make_batch(c.vocab_size, 5);
  auto stats = model->forward_backward(batch.inputs.data(), batch.targets.data(), batch.B,
                                       batch.T, 1.0f);
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  test::ReferenceModel reference(c, model->parameters());
  reference.set_documents(docs);
  const double ref_loss = reference.loss(batch.inputs, batch.targets, batch.B, batch.T, false);
  const double ours = stats->loss + c.moe.aux_loss_coef * stats->aux_loss +
                      c.moe.z_loss_coef * stats->z_loss;
  EXPECT_NEAR(ours, ref_loss, 1e-5 * std::abs(ref_loss));
  const double h = 1e-5;
  for (const Parameter& p : model->parameters()) {
    const float* grad = p.grad.data<float>();
    double scale = 0;
    for (int64_t i = 0; i < p.grad.numel(); ++i) scale = std::max(scale, std::abs(double{grad[i]}));
    const double tol = std::max(1e-6, 1e-3 * scale);
    test::ref::Vec& w = reference.weight(p.name);
    for (int64_t i : sample_indices(p.value.numel(), 12, stream_id(p.name))) {
      const double x = w[i];
      w[i] = x + h;
      const double plus = reference.loss(batch.inputs, batch.targets, batch.B, batch.T, true);
      w[i] = x - h;
      const double minus = reference.loss(batch.inputs, batch.targets, batch.B, batch.T, true);
      w[i] = x;
      ASSERT_NEAR(grad[i], (plus - minus) / (2 * h), tol) << p.name << "[" << i << "]";
    }
  }
}

TEST(TransformerGradient, DenseMatchesFiniteDifferences) { check_gradients(tiny_dense()); }
TEST(TransformerGradient, MoeWithSharedExpertMatchesFiniteDifferences) {
  check_gradients(tiny_moe());
}
// A capacity that drops assignments (0.5: half an even share per expert) and the router
// z-loss, against the reference model doing the same.
TEST(TransformerGradient, MoeWithCapacityDropsAndZLossMatchesFiniteDifferences) {
  config::ModelConfig c = tiny_moe();
  c.moe.capacity_factor = 0.5;
  c.moe.z_loss_coef = 0.1;
  check_gradients(c);
}
TEST(TransformerGradient, ParallelBlockTiedMatchesFiniteDifferences) {
  check_gradients(tiny_parallel_tied());
}
TEST(TransformerGradient, SlidingWindowMatchesFiniteDifferences) { check_gradients(tiny_window()); }
TEST(TransformerGradient, DocumentMaskMatchesFiniteDifferences) {
  check_gradients(tiny_dense(), {true, false, 3});
}
TEST(TransformerGradient, DocumentPositionsMatchFiniteDifferences) {
  check_gradients(tiny_dense(), {true, true, 3});
}
TEST(TransformerGradient, DocumentPositionsWithSlidingWindowMatchFiniteDifferences) {
  check_gradients(tiny_window(), {true, true, 3});
}
TEST(TransformerGradient, DocumentMaskParallelBlockMoeMatchesFiniteDifferences) {
  config::ModelConfig c = tiny_moe();
  c.parallel_block = true;
  check_gradients(c, {true, true, 3});
}

TEST(Transformer, RefusesDocumentMasksItCannotApply) {
  auto model = make_model(tiny_dense());
  const Status positions_alone = model->set_document_mask({false, true, 3});
  EXPECT_EQ(positions_alone.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(positions_alone.message().find("train.document_mask"), std::string::npos);
  const Status outside = model->set_document_mask({true, false, 23});
  EXPECT_NE(outside.message().find("model.vocab_size (23)"), std::string::npos)
      << outside.to_string();
  EXPECT_FALSE(model->document_mask().enabled);
}

TEST(Transformer, LogitsMatchReference) {
  const config::ModelConfig c = tiny_moe();
  auto model = make_model(c);
  randomize(*model, 3);
  const Batch batch = make_batch(c.vocab_size, 8);
  auto logits = model->forward_logits(batch.inputs.data(), batch.B, batch.T);
  ASSERT_TRUE(logits.ok());
  ASSERT_EQ(logits->shape(), (std::vector<int64_t>{batch.B, batch.T, c.vocab_size}));
  test::ReferenceModel reference(c, model->parameters());
  reference.loss(batch.inputs, batch.targets, batch.B, batch.T, false);
  for (int64_t i = 0; i < logits->numel(); ++i) {
    ASSERT_NEAR(logits->data<float>()[i], reference.logits()[i], 1e-5) << i;
  }
}

TEST(Transformer, RepeatedRunsAreBitwiseIdentical) {
  const config::ModelConfig c = tiny_moe();
  auto a = make_model(c, 3), b = make_model(c, 3);
  const Batch batch = make_batch(c.vocab_size, 9);
  for (int step = 0; step < 2; ++step) {
    auto la = a->forward_backward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T, 1);
    auto lb = b->forward_backward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T, 1);
    ASSERT_TRUE(la.ok() && lb.ok());
    EXPECT_EQ(la->loss, lb->loss);
    EXPECT_EQ(la->aux_loss, lb->aux_loss);
  }
  for (size_t i = 0; i < a->parameters().size(); ++i) {
    const Tensor& ga = a->parameters()[i].grad;
    EXPECT_EQ(std::memcmp(ga.raw_data(), b->parameters()[i].grad.raw_data(), ga.nbytes()), 0)
        << a->parameters()[i].name;
  }
}

TEST(Transformer, GradScaleAccumulatesMicroBatches) {
  const config::ModelConfig c = tiny_dense();
  auto once = make_model(c), twice = make_model(c);
  const Batch batch = make_batch(c.vocab_size, 10);
  ASSERT_TRUE(once->forward_backward(batch.inputs.data(), batch.targets.data(), 2, 7, 1.0f).ok());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(twice->forward_backward(batch.inputs.data(), batch.targets.data(), 2, 7, 0.5f).ok());
  }
  // Equal up to rounding: sgemm adds into a gradient that already holds the first half.
  for (size_t i = 0; i < once->parameters().size(); ++i) {
    const float* g1 = once->parameters()[i].grad.data<float>();
    const float* g2 = twice->parameters()[i].grad.data<float>();
    for (int64_t j = 0; j < once->parameters()[i].grad.numel(); ++j) {
      ASSERT_NEAR(g1[j], g2[j], 1e-6 * (1 + std::abs(g1[j]))) << once->parameters()[i].name;
    }
  }
  twice->zero_grads();
  for (const Parameter& p : twice->parameters()) {
    for (float g : p.grad.span<float>()) ASSERT_EQ(g, 0.0f);
  }
}

TEST(Transformer, HooksReportEveryParameterOnceEmbeddingLast) {
  const config::ModelConfig c = tiny_parallel_tied();
  auto model = make_model(c);
  std::vector<size_t> order;
  int polls = 0;
  BackwardHooks hooks{[&](size_t i) { order.push_back(i); }, [&] { ++polls; }};
  const Batch batch = make_batch(c.vocab_size, 4);
  ASSERT_TRUE(model->forward_backward(batch.inputs.data(), batch.targets.data(), 2, 7, 1, &hooks).ok());
  ASSERT_EQ(order.size(), model->parameters().size());
  EXPECT_EQ(std::set<size_t>(order.begin(), order.end()).size(), order.size());
  EXPECT_EQ(model->parameters()[order.back()].name, "model.embed_tokens.weight");
  EXPECT_EQ(model->parameters()[order.front()].name, "model.norm.weight");
  EXPECT_EQ(polls, c.n_layers + 1);
}

TEST(Transformer, ParametersHaveHuggingFaceNamesAndPhiloxInit) {
  const config::ModelConfig c = tiny_moe();
  auto model = make_model(c, 42);
  for (const char* name : {"model.embed_tokens.weight", "model.layers.1.self_attn.k_proj.weight",
                           "model.layers.0.block_sparse_moe.gate.weight",
                           "model.layers.0.block_sparse_moe.experts.3.w2.weight",
                           "model.layers.1.mlp.shared_expert.up_proj.weight",
                           "model.layers.0.post_attention_layernorm.weight", "model.norm.weight",
                           "lm_head.weight"}) {
    EXPECT_TRUE(model->parameter_index(name).ok()) << name;
  }
  EXPECT_FALSE(model->parameter_index("model.layers.0.mlp.gate_proj.weight").ok());
  const Parameter& q = model->parameters()[*model->parameter_index("model.layers.1.self_attn.q_proj.weight")];
  EXPECT_EQ(q.global_shape, (std::vector<int64_t>{16, 16}));
  EXPECT_TRUE(q.shard.is_replicated());
  EXPECT_FLOAT_EQ(q.value.data<float>()[5], 0.02f * normal(42, stream_id(q.name), 5));
  const Parameter& o = model->parameters()[*model->parameter_index("model.layers.0.self_attn.o_proj.weight")];
  EXPECT_FLOAT_EQ(o.value.data<float>()[3], 0.02f / 2.0f * normal(42, stream_id(o.name), 3));
  const Parameter& norm = model->parameters()[*model->parameter_index("model.norm.weight")];
  EXPECT_FALSE(norm.weight_decay);
  for (float v : norm.value.span<float>()) EXPECT_EQ(v, 1.0f);
}

TEST(Transformer, CountsFollowTheDocumentedFormulas) {
  config::ModelConfig c = tiny_dense();
  auto dense = make_model(c);
  const int64_t D = 16, V = 23, F = 24, kv = 2 * 4;  // kv width = n_kv_heads * head_dim
  const int64_t per_layer = 2 * D + D * D * 2 + 2 * kv * D + 3 * D * F;
  EXPECT_EQ(dense->parameter_count(), 2 * V * D + D + 2 * per_layer);
  EXPECT_EQ(dense->active_parameter_count(), dense->parameter_count());
  const double matmul = 2 * (2 * D * D + 2 * kv * D + 3 * D * F) + V * D;
  EXPECT_DOUBLE_EQ(dense->flops_per_token(4), 6 * matmul + 12.0 * 2 * D * 2.5);
  auto moe = make_model(tiny_moe());
  const int64_t expert = 3 * D * 12;
  EXPECT_EQ(moe->parameter_count() - moe->active_parameter_count(), 2 * 2 * expert);
}

TEST(Transformer, RefusesInconsistentConfigsNamingTheKey) {
  struct Bad {
    void (*edit)(config::ModelConfig&);
    const char* key;
  };
  const Bad cases[] = {
      {[](config::ModelConfig& c) { c.n_heads = 5; }, "model.d_model"},
      {[](config::ModelConfig& c) { c.n_kv_heads = 3; }, "model.n_heads"},
      {[](config::ModelConfig& c) { c.n_heads = 16; }, "head size"},
      {[](config::ModelConfig& c) { c.moe.num_experts = 2; c.moe.top_k = 3; }, "model.moe.top_k"},
      {[](config::ModelConfig& c) { c.moe.shared_expert_d_ff = 8; }, "model.moe.shared_expert_d_ff"},
      {[](config::ModelConfig& c) { c.sliding_window = -1; }, "model.sliding_window"},
      {[](config::ModelConfig& c) { c.vocab_size = 0; }, "model.vocab_size"},
  };
  for (const Bad& bad : cases) {
    config::ModelConfig c = tiny_dense();
    bad.edit(c);
    auto model = Transformer::create(c, 1);
    ASSERT_FALSE(model.ok()) << bad.key;
    EXPECT_NE(model.status().message().find(bad.key), std::string::npos) << model.status().to_string();
  }
}

// A 2^42 x 16 f32 embedding (256 TiB) is beyond any address space, so the allocation fails at
// once instead of touching memory.
TEST(Transformer, AModelTooLargeToAllocateIsAnErrorNamingItsSizes) {
  config::ModelConfig c = tiny_dense();
  c.vocab_size = int64_t{1} << 42;
  auto model = Transformer::create(c, 1);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(model.status().message().find("model.vocab_size 4398046511104"), std::string::npos)
      << model.status().to_string();
}

TEST(Transformer, RefusesBadBatchesWithoutTouchingGradients) {
  auto model = make_model(tiny_dense());
  Batch batch = make_batch(23, 1);
  batch.targets[9] = 23;
  auto r = model->forward_backward(batch.inputs.data(), batch.targets.data(), 2, 7, 1.0f);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("position 9"), std::string::npos) << r.status().to_string();
  for (const Parameter& p : model->parameters()) {
    for (float g : p.grad.span<float>()) ASSERT_EQ(g, 0.0f);
  }
  auto too_long = model->forward_loss(batch.inputs.data(), batch.targets.data(), 1, 17);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("model.max_seq_len"), std::string::npos);
}

}  // namespace
}  // namespace ms::model
