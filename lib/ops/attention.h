// Causal scaled-dot-product attention with grouped-query heads and an optional sliding window,
// computed flash-attention style (Dao et al. 2022): queries and keys are taken in tiles of
// `block` positions, the softmax is accumulated online over key tiles, and only the per-row
// log-sum-exp is kept for the backward, which recomputes the probabilities tile by tile. No
// (T x T) score matrix is ever stored; working memory is a few (block x block) tiles per thread.
//
// Query head h reads key/value head h / (heads / kv_heads). Query position i attends to key
// positions j with j <= i and, when window > 0, j > i - window (the `window` most recent
// positions, itself included). Scores are scaled by 1 / sqrt(head_dim).
//
// Determinism: the forward and the dQ pass are split by (batch, head, query tile) and the dK/dV
// pass by (batch, kv head, key tile); each output element is summed by one thread in a fixed
// order.
#pragma once

#include <cstdint>

namespace ms::ops {

struct AttentionShape {
  int64_t batch = 1;
  int64_t seq = 1;
  int64_t heads = 1;
  int64_t kv_heads = 1;  // divides heads
  int64_t head_dim = 1;
  int64_t window = 0;    // 0: full causal
  int64_t block = 64;    // tile size in positions
};

// q: (batch, seq, heads, head_dim), k, v: (batch, seq, kv_heads, head_dim) ->
// out: (batch, seq, heads, head_dim), lse: (batch, heads, seq) natural-log sum of exp scores.
void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                       float* out, float* lse);

// dout like out. Accumulates dq, dk, dv (shaped like q, k, v). out and lse from the forward.
void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const float* out, const float* lse, const float* dout, float* dq,
                        float* dk, float* dv);

}  // namespace ms::ops
