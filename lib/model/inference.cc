// Transformer::forward_cached: the decode/prefill path over a paged key/value cache. It shares
// the training model's parameters, RMSNorm, linear (one sgemm over every token of every chunk),
// SwiGLU and MoE code (Impl::ffn_forward); only what depends on a token's absolute position
// differs from training: rotary embeddings at each token's own position, and attention that
// reads keys and values from the sequence's cache blocks instead of from the same batch.
#include <algorithm>
#include <cmath>
#include <string>

#include "model/model_impl.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/parallel.h"
#include "ops/rmsnorm.h"

namespace ms::model {
namespace {

// One token of the flattened batch: its position and the block table of its sequence.
struct TokenSlot {
  int64_t pos = 0;
  const int32_t* blocks = nullptr;
};

float* sized(std::vector<float>& v, int64_t n) {
  v.resize(static_cast<size_t>(n));
  return v.data();
}

void add_into(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

// x: (heads, hd) of one token rotated in place by position pos (ops/rope.h's convention).
void rope_at(float* x, const ops::RopeTable& table, int64_t pos, int64_t heads) {
  const int64_t half = table.half;
  const float* c = table.cos.data() + pos * half;
  const float* s = table.sin.data() + pos * half;
  for (int64_t h = 0; h < heads; ++h) {
    float* row = x + h * 2 * half;
    for (int64_t i = 0; i < half; ++i) {
      const float a = row[i], b = row[i + half];
      row[i] = a * c[i] - b * s[i];
      row[i + half] = b * c[i] + a * s[i];
    }
  }
}

// Offset of (position, kv head) in a layer's cache: (num_blocks, block_size, kv_heads, hd).
int64_t cache_offset(const PagedKvCache& cache, const TokenSlot& t, int64_t pos) {
  const int64_t block = t.blocks[pos / cache.block_size];
  return ((block * cache.block_size + pos % cache.block_size) * cache.kv_heads) * cache.head_dim;
}

struct AttentionDims {
  int64_t heads, kv_heads, hd, window;
};

// One query head of one token over its sequence's cached keys/values -> out: (hd).
void attend_one(const float* q, const float* kc, const float* vc, const PagedKvCache& cache,
                const TokenSlot& t, int64_t kvh, const AttentionDims& a, float* out,
                std::vector<float>& scores) {
  const int64_t first = a.window > 0 ? std::max<int64_t>(0, t.pos - a.window + 1) : 0;
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.hd));
  scores.resize(static_cast<size_t>(t.pos - first + 1));
  float max_score = -INFINITY;
  for (int64_t j = first; j <= t.pos; ++j) {
    const float* k = kc + cache_offset(cache, t, j) + kvh * a.hd;
    float dot = 0;
    for (int64_t i = 0; i < a.hd; ++i) dot += q[i] * k[i];
    scores[j - first] = dot * scale;
    max_score = std::max(max_score, dot * scale);
  }
  std::fill(out, out + a.hd, 0.0f);
  float sum = 0;
  for (int64_t j = first; j <= t.pos; ++j) {
    const float p = std::exp(scores[j - first] - max_score);
    sum += p;
    const float* v = vc + cache_offset(cache, t, j) + kvh * a.hd;
    for (int64_t i = 0; i < a.hd; ++i) out[i] += p * v[i];
  }
  for (int64_t i = 0; i < a.hd; ++i) out[i] /= sum;
}

// q: (N, heads*hd) -> out: (N, heads*hd), every token over its own cached positions <= pos.
void paged_attention(const float* q, const float* kc, const float* vc, const PagedKvCache& cache,
                     const std::vector<TokenSlot>& slots, const AttentionDims& a, float* out) {
  const int64_t n = static_cast<int64_t>(slots.size()) * a.heads, group = a.heads / a.kv_heads;
  ops::parallel_for(n, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t token = task / a.heads, h = task % a.heads;
      const int64_t row = (token * a.heads + h) * a.hd;
      attend_one(q + row, kc, vc, cache, slots[token], h / group, a, out + row, scores);
    }
  });
}

}  // namespace

void Transformer::Impl::forward_cached(std::span<const CachedChunk> chunks,
                                       const PagedKvCache& cache, float* logits) {
  std::vector<int32_t> ids;
  std::vector<TokenSlot> slots;
  std::vector<int64_t> last_rows;
  for (const CachedChunk& c : chunks) {
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      ids.push_back(c.tokens[i]);
      slots.push_back(TokenSlot{c.start + static_cast<int64_t>(i), c.blocks.data()});
    }
    last_rows.push_back(static_cast<int64_t>(ids.size()) - 1);
  }
  const int64_t N = static_cast<int64_t>(ids.size()), D = cfg.d_model, hd = head_dim();
  const int64_t qd = cfg.n_heads * hd, kvd = cfg.n_kv_heads * hd;
  const float eps = static_cast<float>(cfg.norm_eps);
  const Dims d{1, N, N};
  const AttentionDims ad{cfg.n_heads, cfg.n_kv_heads, hd, cfg.sliding_window};
  std::vector<float> x(N * D), next(N * D);
  ops::embedding_forward(ids.data(), w(embed), x.data(), N, D);
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerIndex& li = layers[l];
    LayerActs& a = acts[l];
    float* normed = sized(scratch.normed, N * D);
    ops::rmsnorm_forward(x.data(), w(li.attn_norm), normed, sized(a.rstd1, N), N, D, eps);
    float* q = sized(a.q, N * qd);
    float* k = sized(a.k, N * kvd);
    float* v = sized(a.v, N * kvd);
    ops::linear_forward(normed, w(li.q), q, N, D, qd);
    ops::linear_forward(normed, w(li.k), k, N, D, kvd);
    ops::linear_forward(normed, w(li.v), v, N, D, kvd);
    for (int64_t t = 0; t < N; ++t) {
      rope_at(q + t * qd, rope, slots[t].pos, cfg.n_heads);
      rope_at(k + t * kvd, rope, slots[t].pos, cfg.n_kv_heads);
      const int64_t at = cache_offset(cache, slots[t], slots[t].pos);
      std::copy(k + t * kvd, k + (t + 1) * kvd, cache.k[l] + at);
      std::copy(v + t * kvd, v + (t + 1) * kvd, cache.v[l] + at);
    }
    float* attn = sized(a.attn, N * qd);
    paged_attention(q, cache.k[l], cache.v[l], cache, slots, ad, attn);
    if (cfg.parallel_block) {
      ops::linear_forward(attn, w(li.o), next.data(), N, qd, D);
      ffn_forward(a, li, normed, sized(scratch.ffn_out, N * D), d);
      add_into(next.data(), x.data(), N * D);
      add_into(next.data(), scratch.ffn_out.data(), N * D);
    } else {
      float* h = sized(a.h, N * D);
      ops::linear_forward(attn, w(li.o), h, N, qd, D);
      add_into(h, x.data(), N * D);
      ops::rmsnorm_forward(h, w(li.ffn_norm), normed, sized(a.rstd2, N), N, D, eps);
      ffn_forward(a, li, normed, next.data(), d);
      add_into(next.data(), h, N * D);
    }
    x.swap(next);
  }
  const int64_t C = static_cast<int64_t>(last_rows.size());
  std::vector<float> last(C * D), last_normed(C * D), rstd(C);
  for (int64_t c = 0; c < C; ++c) {
    std::copy_n(x.data() + last_rows[c] * D, D, last.data() + c * D);
  }
  ops::rmsnorm_forward(last.data(), w(final_norm), last_normed.data(), rstd.data(), C, D, eps);
  ops::linear_forward(last_normed.data(), w(lm_head), logits, C, D, cfg.vocab_size);
}

namespace {

Status check_cache(const config::ModelConfig& c, const PagedKvCache& cache) {
  const int64_t layers = c.n_layers;
  if (cache.kv_heads != c.n_kv_heads || cache.head_dim != c.d_model / c.n_heads ||
      static_cast<int64_t>(cache.k.size()) != layers ||
      static_cast<int64_t>(cache.v.size()) != layers || cache.block_size < 1) {
    return InvalidArgument("KV cache shape (kv_heads " + std::to_string(cache.kv_heads) +
                           ", head_dim " + std::to_string(cache.head_dim) + ", layers " +
                           std::to_string(cache.k.size()) +
                           ") does not match the model; build it from the model's config");
  }
  return Status::OK();
}

Status check_chunk(const config::ModelConfig& c, const PagedKvCache& cache,
                   const CachedChunk& chunk, size_t index) {
  const std::string where = "chunk " + std::to_string(index) + ": ";
  const int64_t n = static_cast<int64_t>(chunk.tokens.size());
  if (n == 0) return InvalidArgument(where + "has no tokens");
  const int64_t end = chunk.start + n;
  if (chunk.start < 0 || end > c.max_seq_len) {
    return InvalidArgument(where + "positions up to " + std::to_string(end) +
                           " exceed model.max_seq_len (" + std::to_string(c.max_seq_len) + ")");
  }
  if (static_cast<int64_t>(chunk.blocks.size()) * cache.block_size < end) {
    return InvalidArgument(where + "block table covers fewer than " + std::to_string(end) +
                           " positions");
  }
  for (int32_t b : chunk.blocks) {
    if (b < 0 || b >= cache.num_blocks) {
      return InvalidArgument(where + "block " + std::to_string(b) + " is outside the cache of " +
                             std::to_string(cache.num_blocks) + " blocks");
    }
  }
  for (int32_t t : chunk.tokens) {
    if (t < 0 || t >= c.vocab_size) {
      return InvalidArgument(where + "token " + std::to_string(t) +
                             " is outside the vocabulary of model.vocab_size (" +
                             std::to_string(c.vocab_size) + ")");
    }
  }
  return Status::OK();
}

}  // namespace

Result<Tensor> Transformer::forward_cached(std::span<const CachedChunk> chunks,
                                           const PagedKvCache& cache) {
  if (chunks.empty()) return InvalidArgument("forward_cached needs at least one chunk");
  MS_RETURN_IF_ERROR(check_cache(impl_->cfg, cache));
  for (size_t i = 0; i < chunks.size(); ++i) {
    MS_RETURN_IF_ERROR(check_chunk(impl_->cfg, cache, chunks[i], i));
  }
  const int64_t C = static_cast<int64_t>(chunks.size());
  Tensor out = Tensor::empty(DType::kF32, {C, impl_->cfg.vocab_size});
  impl_->forward_cached(chunks, cache, out.data<float>());
  return out;
}

}  // namespace ms::model
