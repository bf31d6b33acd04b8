// Tiny model configurations shared by the inference tests: small enough that the full-forward
// reference stays fast on 2 cores, shaped to exercise GQA, MoE (with a shared expert), the
// sliding window, the parallel block and tied embeddings. Also `take`, for Results a test
// expects to be OK, the bundled GPT-2 tokenizer's path, and weights whose logits overflow.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <string>
#include <utility>

#include "config/run_config.h"
#include "core/status.h"
#include "model/transformer.h"

namespace ms::infer::testing {

// The value of a Result the test expects to be OK.
template <typename T>
T take(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

// The GPT-2 tokenizer.json bundled with the sources (MS_SOURCE_DIR, else the working directory).
inline std::string gpt2_tokenizer() {
  const char* src = std::getenv("MS_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/data/tokenizers/gpt2/tokenizer.json";
}

inline config::ModelConfig tiny_dense() {
  config::ModelConfig c;
  c.vocab_size = 96;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 48;
  c.max_seq_len = 64;
  return c;
}

inline config::ModelConfig tiny_moe() {
  config::ModelConfig c = tiny_dense();
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.shared_expert_d_ff = 16;
  return c;
}

inline config::ModelConfig tiny_window_parallel_tied() {
  config::ModelConfig c = tiny_dense();
  c.sliding_window = 5;
  c.parallel_block = true;
  c.tie_embeddings = true;
  return c;
}

// Sets every lm_head weight to FLT_MAX: finite weights (like a quantized directory's huge but
// finite scales) whose products overflow, so every logit is inf or NaN.
inline void overflow_lm_head(model::Transformer& m) {
  for (model::Parameter& p : m.parameters()) {
    if (p.name != "lm_head.weight") continue;
    std::fill_n(p.value.data<float>(), p.value.numel(), FLT_MAX);
    return;
  }
  ADD_FAILURE() << "the model has no lm_head.weight";
}

}  // namespace ms::infer::testing
