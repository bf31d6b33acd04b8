// Pipeline stages of the Transformer in one process: the model cut into chunks
// (PipelineChunk) and run stage by stage, the activation of one chunk handed to the next and
// the gradient back, must give the whole model's loss and gradients. The order in which
// micro-batches run through the chunks (all forwards first, 1F1B-like interleaving, the
// zero-bubble split with deferred weight gradients) must not matter: each parameter still
// accumulates its micro-batches in the same order, so untied models match bitwise; a tied
// embedding is two copies on the first and last stage whose gradients are summed, so it
// matches within fp32 rounding. Under document masking every stage reads the inputs (where
// the documents end) and each in-flight micro-batch keeps its own documents.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/transformer.h"

namespace ms::model {
namespace {

config::ModelConfig dense4() {
  config::ModelConfig c;
  c.vocab_size = 29;
  c.d_model = 16;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  c.max_seq_len = 16;
  c.rope_theta = 100.0;
  return c;
}

config::ModelConfig moe4() {
  config::ModelConfig c = dense4();
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.aux_loss_coef = 0.05;
  c.moe.shared_expert_d_ff = 12;
  c.d_ff = 12;
  return c;
}

struct MicroBatch {
  std::vector<int32_t> inputs, targets;
};

constexpr int64_t kB = 2, kT = 6;

std::vector<MicroBatch> make_batches(int n, int64_t vocab) {
  std::mt19937_64 rng(7);
  std::vector<MicroBatch> out(static_cast<size_t>(n));
  for (MicroBatch& mb : out) {
    for (int64_t i = 0; i < kB * kT; ++i) {
      mb.inputs.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
      mb.targets.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
    }
  }
  return out;
}

// The gradients by parameter name: the whole model's (a tied embedding once).
using Grads = std::map<std::string, std::vector<float>>;

void add_grads(const Transformer& m, Grads& out) {
  for (const Parameter& p : m.parameters()) {
    std::vector<float>& g = out[p.name];
    const float* v = p.grad.data<float>();
    if (g.empty()) {
      g.assign(v, v + p.grad.numel());
    } else {
      // The tied embedding's two copies: their sum is the gradient (the embedding group).
      for (size_t i = 0; i < g.size(); ++i) g[i] += v[i];
    }
  }
}

struct WholeRun {
  std::vector<double> losses;
  Grads grads;
};

WholeRun run_whole(const config::ModelConfig& c, const std::vector<MicroBatch>& batches,
                   const DocumentMask& docs = {}) {
  auto model = Transformer::create(c, 11);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_TRUE((*model)->set_document_mask(docs).ok());
  WholeRun run;
  const float scale = 1.0f / static_cast<float>(batches.size());
  for (const MicroBatch& mb : batches) {
    auto stats = (*model)->forward_backward(mb.inputs.data(), mb.targets.data(), kB, kT, scale);
    EXPECT_TRUE(stats.ok()) << stats.status().to_string();
    run.losses.push_back(stats->loss + c.moe.aux_loss_coef * stats->aux_loss);
  }
  add_grads(**model, run.grads);
  return run;
}

enum class Order { kAllForwardFirst, kInterleaved, kZeroBubble };

// Runs the micro-batches through chunks of `counts` layers each in `order`.
WholeRun run_stages(const config::ModelConfig& c, const std::vector<MicroBatch>& batches,
                    const std::vector<int64_t>& counts, Order order,
                    const DocumentMask& docs = {}) {
  std::vector<std::unique_ptr<Transformer>> chunks;
  int64_t first = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    ModelParallel parallel;
    parallel.chunk = {first, counts[s], s == 0, s + 1 == counts.size()};
    first += counts[s];
    auto chunk = Transformer::create(c, 11, parallel);
    EXPECT_TRUE(chunk.ok()) << chunk.status().to_string();
    EXPECT_TRUE((*chunk)->set_document_mask(docs).ok());
    chunks.push_back(std::move(*chunk));
  }
  const size_t S = chunks.size();
  const int64_t elements = chunks[0]->stage_activation_elements(kB, kT);
  const float scale = 1.0f / static_cast<float>(batches.size());
  WholeRun run;
  run.losses.assign(batches.size(), 0.0);
  const bool defer = order == Order::kZeroBubble;
  const auto forward = [&](size_t mb) {
    std::vector<float> act;
    for (size_t s = 0; s < S; ++s) {
      std::vector<float> out(s + 1 < S ? static_cast<size_t>(elements) : 0);
      StageBatch b{batches[mb].inputs.data(), batches[mb].targets.data(), kB, kT, scale};
      auto stats = chunks[s]->stage_forward(static_cast<int>(mb), b, act, out);
      ASSERT_TRUE(stats.ok()) << stats.status().to_string();
      run.losses[mb] += (s + 1 == S ? stats->loss : 0.0) + c.moe.aux_loss_coef * stats->aux_loss;
      act = std::move(out);
    }
  };
  const auto backward = [&](size_t mb) {
    std::vector<float> grad;
    for (size_t s = S; s-- > 0;) {
      std::vector<float> grad_in(s > 0 ? static_cast<size_t>(elements) : 0);
      ASSERT_TRUE(chunks[s]->stage_backward(static_cast<int>(mb), grad, grad_in, defer).ok());
      grad = std::move(grad_in);
    }
  };
  const auto weights = [&](size_t mb) {
    for (size_t s = 0; s < S; ++s) {
      ASSERT_TRUE(chunks[s]->stage_backward_weight(static_cast<int>(mb)).ok());
    }
  };
  const size_t m = batches.size();
  if (order == Order::kAllForwardFirst) {
    for (size_t mb = 0; mb < m; ++mb) forward(mb);
    for (size_t mb = 0; mb < m; ++mb) backward(mb);
  } else {
    // Two in flight: F0 F1 B0 F2 B1 F3 ... (the zero-bubble order defers each W past the
    // next forward).
    forward(0);
    for (size_t mb = 0; mb < m; ++mb) {
      if (mb + 1 < m) forward(mb + 1);
      backward(mb);
      if (defer) weights(mb);
    }
  }
  for (const auto& chunk : chunks) add_grads(*chunk, run.grads);
  return run;
}

void expect_same(const WholeRun& whole, const WholeRun& staged, double tol) {
  ASSERT_EQ(whole.losses.size(), staged.losses.size());
  for (size_t i = 0; i < whole.losses.size(); ++i) {
    EXPECT_NEAR(whole.losses[i], staged.losses[i], 1e-6 * std::abs(whole.losses[i])) << "mb " << i;
  }
  ASSERT_EQ(whole.grads.size(), staged.grads.size());
  for (const auto& [name, g] : whole.grads) {
    auto it = staged.grads.find(name);
    ASSERT_NE(it, staged.grads.end()) << name;
    ASSERT_EQ(g.size(), it->second.size()) << name;
    for (size_t i = 0; i < g.size(); ++i) {
      if (tol == 0) {
        ASSERT_EQ(g[i], it->second[i]) << name << " element " << i;
      } else {
        ASSERT_NEAR(g[i], it->second[i], tol * (1.0 + std::abs(g[i]))) << name << " element " << i;
      }
    }
  }
}

TEST(TransformerPipeline, TwoChunksAllOrdersMatchTheWholeModelBitwise) {
  const config::ModelConfig c = dense4();
  const std::vector<MicroBatch> batches = make_batches(4, c.vocab_size);
  const WholeRun whole = run_whole(c, batches);
  for (Order order : {Order::kAllForwardFirst, Order::kInterleaved, Order::kZeroBubble}) {
    SCOPED_TRACE(static_cast<int>(order));
    expect_same(whole, run_stages(c, batches, {2, 2}, order), 0);
  }
}

TEST(TransformerPipeline, UnevenChunksAndOneLayerStagesMatch) {
  const config::ModelConfig c = dense4();
  const std::vector<MicroBatch> batches = make_batches(3, c.vocab_size);
  const WholeRun whole = run_whole(c, batches);
  expect_same(whole, run_stages(c, batches, {3, 1}, Order::kInterleaved), 0);
  expect_same(whole, run_stages(c, batches, {1, 1, 1, 1}, Order::kZeroBubble), 0);
}

TEST(TransformerPipeline, MoeAndParallelBlockMatch) {
  config::ModelConfig c = moe4();
  const std::vector<MicroBatch> batches = make_batches(3, c.vocab_size);
  expect_same(run_whole(c, batches), run_stages(c, batches, {1, 3}, Order::kZeroBubble), 0);
  c.parallel_block = true;
  expect_same(run_whole(c, batches), run_stages(c, batches, {2, 2}, Order::kInterleaved), 0);
}

// Every micro-batch ends its documents elsewhere, so a stage that mixed up the in-flight
// micro-batches' documents would differ.
TEST(TransformerPipeline, DocumentMaskStagesMatchTheWholeModelBitwise) {
  config::ModelConfig c = dense4();
  c.sliding_window = 4;
  std::vector<MicroBatch> batches = make_batches(4, c.vocab_size);
  const DocumentMask docs{true, true, 2};
  for (size_t mb = 0; mb < batches.size(); ++mb) {
    batches[mb].inputs[mb % 3 + 1] = docs.eod_id;
    batches[mb].inputs[kT + (mb + 2) % 5] = docs.eod_id;
  }
  const WholeRun whole = run_whole(c, batches, docs);
  EXPECT_GT(std::abs(whole.losses[0] - run_whole(c, batches).losses[0]), 1e-6)
      << "the mask changes the loss";
  for (Order order : {Order::kAllForwardFirst, Order::kInterleaved, Order::kZeroBubble}) {
    SCOPED_TRACE(static_cast<int>(order));
    expect_same(whole, run_stages(c, batches, {2, 2}, order, docs), 0);
  }
  expect_same(whole, run_stages(c, batches, {1, 1, 1, 1}, Order::kInterleaved, docs), 0);
  // A later stage without the inputs cannot tell where documents end.
  ModelParallel later;
  later.chunk = {2, 2, false, true};
  auto m = Transformer::create(c, 11, later);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE((*m)->set_document_mask(docs).ok());
  std::vector<float> act(static_cast<size_t>((*m)->stage_activation_elements(kB, kT)));
  const StageBatch no_inputs{nullptr, batches[0].targets.data(), kB, kT, 1.0f};
  auto refused = (*m)->stage_forward(0, no_inputs, act, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("every pipeline stage"), std::string::npos);
}

TEST(TransformerPipeline, TiedEmbeddingCopiesSumToTheWholeGradient) {
  config::ModelConfig c = dense4();
  c.tie_embeddings = true;
  const std::vector<MicroBatch> batches = make_batches(4, c.vocab_size);
  const WholeRun whole = run_whole(c, batches);
  expect_same(whole, run_stages(c, batches, {2, 2}, Order::kInterleaved), 1e-6);
  expect_same(whole, run_stages(c, batches, {2, 2}, Order::kZeroBubble), 1e-6);
}

TEST(TransformerPipeline, ChunksHoldOnlyTheirParametersWithGlobalNames) {
  config::ModelConfig c = dense4();
  c.tie_embeddings = true;
  ModelParallel middle;
  middle.chunk = {1, 2, false, false};
  auto m = Transformer::create(c, 1, middle);
  ASSERT_TRUE(m.ok());
  for (const Parameter& p : (*m)->parameters()) {
    EXPECT_TRUE(p.name.rfind("model.layers.1.", 0) == 0 || p.name.rfind("model.layers.2.", 0) == 0)
        << p.name;
  }
  ModelParallel last;
  last.chunk = {3, 1, false, true};
  auto l = Transformer::create(c, 1, last);
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE((*l)->parameter_index("model.embed_tokens.weight").ok());  // the tied copy
  EXPECT_TRUE((*l)->parameter_index("model.norm.weight").ok());
  EXPECT_FALSE((*l)->parameter_index("model.layers.2.input_layernorm.weight").ok());
}

TEST(TransformerPipeline, RefusesBadChunksSpansAndOrder) {
  const config::ModelConfig c = dense4();
  ModelParallel bad;
  bad.chunk = {3, 2, false, true};
  auto refused = Transformer::create(c, 1, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("model.n_layers"), std::string::npos);

  ModelParallel first;
  first.chunk = {0, 2, true, false};
  auto m = Transformer::create(c, 1, first);
  ASSERT_TRUE(m.ok());
  const std::vector<MicroBatch> batches = make_batches(1, c.vocab_size);
  StageBatch b{batches[0].inputs.data(), batches[0].targets.data(), kB, kT, 1.0f};
  std::vector<float> small(3);
  EXPECT_FALSE((*m)->stage_forward(0, b, {}, small).ok());
  std::vector<float> out(static_cast<size_t>((*m)->stage_activation_elements(kB, kT)));
  EXPECT_FALSE((*m)->stage_backward(0, out, {}).ok());  // nothing in flight
  ASSERT_TRUE((*m)->stage_forward(0, b, {}, out).ok());
  EXPECT_FALSE((*m)->stage_forward(0, b, {}, out).ok());  // already in flight
  EXPECT_FALSE((*m)->forward_backward(b.inputs, b.targets, kB, kT, 1.0f).ok());
  ASSERT_TRUE((*m)->stage_backward(0, out, {}, true).ok());
  EXPECT_TRUE((*m)->stage_backward_weight(0).ok());
  EXPECT_FALSE((*m)->stage_backward_weight(0).ok());
}

}  // namespace
}  // namespace ms::model
