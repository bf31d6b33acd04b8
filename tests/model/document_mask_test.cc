// Document masking as a user relies on it: a packed sample of two documents (the first ending
// with the end-of-document token) gives every token the logits, per-token loss and gradients
// it has when its document runs alone, with and without per-document positions and with and
// without a sliding window; and the cached inference path, after a prompt "docA EOD docB",
// generates exactly what it generates after "docB" alone. Without the mask the packed results
// differ, so the comparisons can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/documents.h"
#include "model/transformer.h"

namespace ms::model {
namespace {

constexpr int32_t kEod = 3;

config::ModelConfig tiny(int64_t window) {
  config::ModelConfig c;
  c.vocab_size = 23;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  c.max_seq_len = 32;
  c.rope_theta = 100.0;
  c.sliding_window = window;
  return c;
}

std::unique_ptr<Transformer> make_model(const config::ModelConfig& c, const DocumentMask& docs) {
  auto model = Transformer::create(c, 7);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  // Weights larger than the initialization, so attention is far from uniform.
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (Parameter& p : (*model)->parameters()) {
    for (float& v : p.value.span<float>()) v = p.weight_decay ? normal(rng) : 1.0f;
  }
  EXPECT_TRUE((*model)->set_document_mask(docs).ok());
  return std::move(model).value();
}

const std::vector<int32_t> kDocA{5, 9, 1, 17, 12, 7, kEod};
const std::vector<int32_t> kDocB{8, 2, 14, 6, 11, 20, 4, 15};

std::vector<int32_t> concat(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

std::vector<float> logits_of(Transformer& m, const std::vector<int32_t>& tokens) {
  Result<Tensor> logits = m.forward_logits(tokens.data(), 1, static_cast<int64_t>(tokens.size()));
  EXPECT_TRUE(logits.ok()) << logits.status().to_string();
  return std::vector<float>(logits->data<float>(), logits->data<float>() + logits->numel());
}

// Cross-entropy of each row of logits (n, V) against its target.
std::vector<double> token_losses(const std::vector<float>& logits,
                                 const std::vector<int32_t>& targets, int64_t V) {
  std::vector<double> out;
  for (size_t i = 0; i < targets.size(); ++i) {
    const float* row = logits.data() + static_cast<int64_t>(i) * V;
    const double mx = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    out.push_back(mx + std::log(sum) - row[targets[i]]);
  }
  return out;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

struct Case {
  std::string name;
  int64_t window;
  bool positions;
};

const std::vector<Case> kCases{{"mask", 0, false},
                               {"mask_positions", 0, true},
                               {"mask_window", 3, false},
                               {"mask_positions_window", 3, true}};

TEST(DocumentMask, PackedDocumentsMatchSeparateRunsTokenByToken) {
  for (const Case& k : kCases) {
    const config::ModelConfig c = tiny(k.window);
    auto model = make_model(c, {true, k.positions, kEod});
    const std::vector<int32_t> packed = concat(kDocA, kDocB);
    std::vector<float> separate = logits_of(*model, kDocA);
    const std::vector<float> b_alone = logits_of(*model, kDocB);
    separate.insert(separate.end(), b_alone.begin(), b_alone.end());
    const std::vector<float> together = logits_of(*model, packed);
    ASSERT_EQ(together.size(), separate.size());
    EXPECT_LT(max_diff(together, separate), 1e-5) << k.name;
    std::vector<int32_t> targets(packed.size());
    for (size_t i = 0; i < targets.size(); ++i) targets[i] = int32_t((i * 7 + 2) % 23);
    const std::vector<double> want = token_losses(separate, targets, c.vocab_size);
    const std::vector<double> got = token_losses(together, targets, c.vocab_size);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5) << k.name << " " << i;
    }

    // Without the mask docB's tokens see docA, so the same comparison fails.
    auto plain = make_model(c, {});
    const std::vector<float> mixed = logits_of(*plain, packed);
    EXPECT_GT(max_diff(mixed, separate), 1e-3) << k.name;
  }
}

// d(mean loss over the 15 packed tokens) = (7 d(mean over docA) + 8 d(mean over docB)) / 15.
TEST(DocumentMask, PackedGradientsAreTheTokenWeightedSumOfSeparateRuns) {
  for (const Case& k : kCases) {
    const config::ModelConfig c = tiny(k.window);
    auto packed_model = make_model(c, {true, k.positions, kEod});
    auto separate_model = make_model(c, {true, k.positions, kEod});
    const std::vector<int32_t> packed = concat(kDocA, kDocB);
    std::vector<int32_t> targets(packed.size());
    for (size_t i = 0; i < targets.size(); ++i) targets[i] = int32_t((i * 5 + 1) % 23);
    const int64_t na = int64_t(kDocA.size()), nb = int64_t(kDocB.size()), n = na + nb;
    ASSERT_TRUE(packed_model->forward_backward(packed.data(), targets.data(), 1, n, 1.0f).ok());
    const std::vector<int32_t> ta(targets.begin(), targets.begin() + na);
    const std::vector<int32_t> tb(targets.begin() + na, targets.end());
    ASSERT_TRUE(separate_model
                    ->forward_backward(kDocA.data(), ta.data(), 1, na, float(na) / float(n))
                    .ok());
    ASSERT_TRUE(separate_model
                    ->forward_backward(kDocB.data(), tb.data(), 1, nb, float(nb) / float(n))
                    .ok());
    for (size_t p = 0; p < packed_model->parameters().size(); ++p) {
      const Parameter& got = packed_model->parameters()[p];
      const Parameter& want = separate_model->parameters()[p];
      double scale = 0, diff = 0;
      for (int64_t i = 0; i < got.grad.numel(); ++i) {
        scale = std::max(scale, std::abs(double(want.grad.data<float>()[i])));
        diff = std::max(diff, std::abs(double(got.grad.data<float>()[i]) -
                                       want.grad.data<float>()[i]));
      }
      EXPECT_LE(diff, 1e-5 * std::max(1.0, scale)) << k.name << " " << got.name;
    }
  }
}

TEST(DocumentMask, LayoutCountsDocumentsAndPositions) {
  const std::vector<int32_t> tokens{1, kEod, kEod, 4, 5, kEod, 6, 7, 8};  // B = 3 rows of 3
  std::vector<int32_t> doc(tokens.size());
  std::vector<int64_t> pos(tokens.size());
  document_layout(tokens.data(), 3, 3, kEod, doc.data(), pos.data());
  EXPECT_EQ(doc, (std::vector<int32_t>{0, 0, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(pos, (std::vector<int64_t>{0, 1, 0, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(next_document_start(tokens, 10, 4, kEod), 16);
  EXPECT_EQ(next_document_start(std::vector<int32_t>{6, 7}, 10, 4, kEod), 4);
}

// ---- the cached inference path ----

// A paged KV cache owned by the test.
struct Cache {
  std::vector<std::vector<float>> k, v;
  std::vector<int32_t> blocks;
  PagedKvCache view;
  Cache(const config::ModelConfig& c, int64_t positions) {
    view.block_size = 4;
    view.num_blocks = (positions + 3) / 4;
    view.kv_heads = c.n_kv_heads;
    view.head_dim = c.d_model / c.n_heads;
    const size_t floats = size_t(view.num_blocks * view.block_size * view.kv_heads * view.head_dim);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      k.emplace_back(floats, 0.0f);
      v.emplace_back(floats, 0.0f);
      view.k.push_back(k.back().data());
      view.v.push_back(v.back().data());
    }
    // Blocks in reverse order, so positions and cache slots differ.
    for (int64_t b = view.num_blocks; b-- > 0;) blocks.push_back(int32_t(b));
  }
};

// Feeds `prompt` in the given chunk lengths, then decodes `steps` tokens greedily, tracking
// the document start as a server does; returns the logits of every step (prefill's last first).
std::vector<std::vector<float>> generate(Transformer& m, const std::vector<int32_t>& prompt,
                                         const std::vector<size_t>& chunk_lengths, int steps) {
  const config::ModelConfig& c = m.config();
  Cache cache(c, int64_t(prompt.size()) + steps);
  std::vector<std::vector<float>> out;
  int64_t position = 0, doc_start = 0;
  Tensor logits;
  const auto feed = [&](std::span<const int32_t> tokens) {
    const CachedChunk chunk{tokens, position, cache.blocks, doc_start};
    Result<Tensor> l = m.forward_cached(std::span<const CachedChunk>(&chunk, 1), cache.view);
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    logits = std::move(l).value();
    if (m.document_mask().enabled) {
      doc_start = next_document_start(tokens, position, doc_start, m.document_mask().eod_id);
    }
    position += int64_t(tokens.size());
  };
  size_t at = 0;
  for (size_t n : chunk_lengths) {
    feed(std::span<const int32_t>(prompt.data() + at, n));
    at += n;
  }
  EXPECT_EQ(at, prompt.size());
  for (int s = 0; s <= steps; ++s) {
    const float* row = logits.data<float>();
    out.emplace_back(row, row + c.vocab_size);
    if (s == steps) break;
    const int32_t next = int32_t(std::max_element(row, row + c.vocab_size) - row);
    feed(std::span<const int32_t>(&next, 1));
  }
  return out;
}

TEST(DocumentMask, CachedGenerationAfterAnEndOfDocumentIgnoresTheDocumentBefore) {
  for (const Case& k : kCases) {
    const config::ModelConfig c = tiny(k.window);
    auto model = make_model(c, {true, k.positions, kEod});
    const std::vector<int32_t> packed = concat(kDocA, kDocB);
    const auto alone = generate(*model, kDocB, {kDocB.size()}, 5);
    // The whole prompt at once, and docA and docB in separate prefill calls.
    for (const std::vector<size_t>& split :
         {std::vector<size_t>{packed.size()}, std::vector<size_t>{kDocA.size(), kDocB.size()}}) {
      const auto after = generate(*model, packed, split, 5);
      ASSERT_EQ(after.size(), alone.size());
      for (size_t s = 0; s < after.size(); ++s) {
        EXPECT_LT(max_diff(after[s], alone[s]), 1e-5) << k.name << " step " << s;
        EXPECT_EQ(std::max_element(after[s].begin(), after[s].end()) - after[s].begin(),
                  std::max_element(alone[s].begin(), alone[s].end()) - alone[s].begin());
      }
    }
    // The cached prefill agrees with the training forward on the packed prompt's last token.
    const std::vector<float> train = logits_of(*model, packed);
    const auto prefill = generate(*model, packed, {packed.size()}, 0);
    const std::vector<float> last(train.end() - c.vocab_size, train.end());
    EXPECT_LT(max_diff(prefill[0], last), 1e-5) << k.name;

    // Without the mask docB's first tokens see docA (within the window too), so they differ.
    auto plain = make_model(c, {});
    const std::vector<int32_t> b_start(kDocB.begin(), kDocB.begin() + 2);
    const std::vector<int32_t> a_then_b_start = concat(kDocA, b_start);
    const auto mixed = generate(*plain, a_then_b_start, {a_then_b_start.size()}, 0);
    const auto clean = generate(*plain, b_start, {b_start.size()}, 0);
    EXPECT_GT(max_diff(mixed[0], clean[0]), 1e-3) << k.name;
    const auto masked = generate(*model, a_then_b_start, {a_then_b_start.size()}, 0);
    EXPECT_LT(max_diff(masked[0], clean[0]), 1e-5) << k.name;
  }
}

TEST(DocumentMask, CachedChunksRefuseADocumentStartAfterTheirStart) {
  const config::ModelConfig c = tiny(0);
  auto model = make_model(c, {true, false, kEod});
  Cache cache(c, 8);
  const std::vector<int32_t> tokens{1, 2};
  const CachedChunk chunk{tokens, 0, cache.blocks, 1};
  Result<Tensor> l = model->forward_cached(std::span<const CachedChunk>(&chunk, 1), cache.view);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("doc_start 1"), std::string::npos) << l.status().to_string();
}

}  // namespace
}  // namespace ms::model
