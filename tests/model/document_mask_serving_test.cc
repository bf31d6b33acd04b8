// The serving engine (infer/engine.h) under document masking: with the requests "docA EOD
// docB" and "docB" batched together, every generated token's logits agree within 1e-5, so the
// engine carries each sequence's document start from the prompt into the decode steps (the
// model-level cached path is in document_mask_test.cc). With the mask off they differ.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "infer/engine.h"
#include "model/transformer.h"

namespace ms::model {
namespace {

constexpr int32_t kEod = 3;

std::unique_ptr<Transformer> make_model(int64_t window, const DocumentMask& docs) {
  config::ModelConfig c;
  c.vocab_size = 23;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  c.max_seq_len = 64;
  c.rope_theta = 100.0;
  c.sliding_window = window;
  auto model = Transformer::create(c, 7);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (Parameter& p : (*model)->parameters()) {
    for (float& v : p.value.span<float>()) v = p.weight_decay ? normal(rng) : 1.0f;
  }
  EXPECT_TRUE((*model)->set_document_mask(docs).ok());
  return std::move(model).value();
}

std::vector<infer::Completion> serve(Transformer& m) {
  const std::vector<int32_t> doc_a{5, 9, 1, 17, 12, 7, kEod}, doc_b{8, 2, 14, 6, 11};
  std::vector<int32_t> packed = doc_a;
  packed.insert(packed.end(), doc_b.begin(), doc_b.end());
  std::vector<infer::Request> requests(2);
  requests[0].id = "after";
  requests[0].prompt = packed;
  requests[1].id = "alone";
  requests[1].prompt = doc_b;
  for (infer::Request& r : requests) r.max_tokens = 12;
  infer::EngineOptions options;
  options.keep_logits = true;
  options.block_size = 4;
  options.kv_blocks = 16;
  auto engine = infer::Engine::create(m, nullptr, options);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  auto out = (*engine)->generate(requests);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  return std::move(out).value();
}

double max_step_diff(const std::vector<infer::Completion>& c) {
  double diff = 0;
  for (size_t s = 0; s < c[0].logits.size(); ++s) {
    for (size_t v = 0; v < c[0].logits[s].size(); ++v) {
      diff = std::max(diff, std::abs(double(c[0].logits[s][v]) - c[1].logits[s][v]));
    }
  }
  return diff;
}

TEST(DocumentMaskServing, DecodingAfterAnEndOfDocumentIgnoresTheDocumentBefore) {
  for (int64_t window : {int64_t{0}, int64_t{4}}) {
    for (bool positions : {false, true}) {
      auto model = make_model(window, {true, positions, kEod});
      const std::vector<infer::Completion> c = serve(*model);
      ASSERT_EQ(c[0].logits.size(), 12u);
      ASSERT_EQ(c[1].logits.size(), 12u);
      EXPECT_EQ(c[0].tokens, c[1].tokens) << "window " << window << " positions " << positions;
      EXPECT_LT(max_step_diff(c), 1e-5) << "window " << window << " positions " << positions;
    }
  }
  auto plain = make_model(0, {});
  EXPECT_GT(max_step_diff(serve(*plain)), 1e-3);
}

}  // namespace
}  // namespace ms::model
