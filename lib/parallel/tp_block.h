// Tensor-parallel transformer block components, forward and backward: the SwiGLU MLP and causal
// grouped-query self-attention with rotary embeddings, each as Megatron places them (a
// column-parallel group of projections reading one input, then one row-parallel projection).
// Each is the single-process computation of lib/model/compute.cc split over a tp group:
//
//   MLP:        gate, up column-parallel (rank r holds the same slice tp_slice(d_ff) of both),
//               silu(gate) * up on the slice, down row-parallel.
//   attention:  q column-parallel by whole query heads, k and v by whole key/value heads:
//               rank r holds kv heads [r KV/tp, (r+1) KV/tp) and query heads
//               [r H/tp, (r+1) H/tp), exactly the query heads that read those kv heads (query
//               head h reads kv head h / (H/KV)), so attention runs locally on H/tp heads and
//               KV/tp kv heads with no communication; o row-parallel over the same heads.
//
// Global weights are ops/linear.h's (out_features, in_features); a head's features are rows
// [h hd, (h+1) hd) of q/k/v and columns of o, so a head slice is a tp_slice of the features.
//
// Communication per block, n the tokens of the whole block (rows of the (batch, seq) input):
//   no SP:  forward one all-reduce (after the row-parallel projection), backward one
//           all-reduce (of the input gradient summed over the column-parallel group);
//   SP:     x (n/tp, D): one all-gather before the group, one reduce-scatter after the row-
//           parallel projection; backward one all-gather of dy, one of x again (as
//           tp_linear.h, so only the (n/tp, D) shard is saved) and one reduce-scatter of dx.
// The group's projections share that gather and that reduction (not one per projection).
//
// Every function is collective over `tp`; all ranks call it with the same shape. Shapes and the
// layout rule (tp_layout.h's check_tp_heads / check_tp_d_ff) are checked before any
// communication, so a refused layout is refused by every rank alike. Backward passes accumulate
// (+=) into dx and the weight gradients; a null dx skips the input gradient and its collective.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "ops/rope.h"

namespace ms::parallel {

// ---- SwiGLU MLP: y = down(silu(gate(x)) * up(x)) ----

struct TpMlpShape {
  int64_t rows = 0;     // n: tokens of the whole block, before any SP split
  int64_t d_model = 0;  // D
  int64_t d_ff = 0;     // F, global; tp must divide it
  bool sequence_parallel = false;
};

// Rank r's slices: gate, up (F/tp, D) rows tp_slice(F); down (D, F/tp) those columns.
struct TpMlpWeights {
  const float* gate = nullptr;
  const float* up = nullptr;
  const float* down = nullptr;
};
struct TpMlpGrads {
  float* gate = nullptr;
  float* up = nullptr;
  float* down = nullptr;
};

// What the forward keeps for the backward: the local gate and up projections, (n, F/tp) each.
// The SwiGLU product is recomputed in the backward, as lib/model does.
struct TpMlpActs {
  std::vector<float> gate, up;
};

// InvalidArgument for sizes < 1 (rows < 0), tp not dividing d_ff (named model.d_ff), or with SP
// tp not dividing rows.
Status check_tp_mlp(const TpMlpShape& shape, int tp);

// x: (n, D), or (n/tp, D) with SP -> y: the same shape (overwritten); fills acts.
Status tp_mlp_forward(comm::Communicator& tp, const TpMlpShape& shape, const TpMlpWeights& w,
                      const float* x, TpMlpActs& acts, float* y);

// x and acts as the forward had them; dy shaped like y. Accumulates dx (shaped like x, may be
// null) and the three local weight gradients (no reduction needed: each slice is the rank's).
Status tp_mlp_backward(comm::Communicator& tp, const TpMlpShape& shape, const TpMlpWeights& w,
                       const float* x, const TpMlpActs& acts, const float* dy, float* dx,
                       const TpMlpGrads& grads);

// ---- causal grouped-query self-attention: y = o(attention(rope(q(x)), rope(k(x)), v(x))) ----

struct TpAttentionShape {
  int64_t batch = 1;  // B; the input's rows are (B, T) row-major, n = B T
  int64_t seq = 1;    // T
  int64_t d_model = 0;
  int64_t n_heads = 0;     // H, global
  int64_t n_kv_heads = 0;  // KV, global; divides H
  int64_t head_dim = 0;    // hd, even (rotary pairs)
  int64_t window = 0;      // sliding window as in ops/attention.h; 0: full causal
  bool sequence_parallel = false;  // splits the n rows, so tp must divide B T
};

// Rank r's slices: q (H/tp hd, D), k and v (KV/tp hd, D) rows; o (D, H/tp hd) columns.
struct TpAttentionWeights {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* o = nullptr;
};
struct TpAttentionGrads {
  float* q = nullptr;
  float* k = nullptr;
  float* v = nullptr;
  float* o = nullptr;
};

// Kept for the backward, all local: q (n, H/tp hd), k, v (n, KV/tp hd) after rotary
// embeddings, the attention output attn (n, H/tp hd) and its log-sum-exp lse (B, H/tp, T).
struct TpAttentionActs {
  std::vector<float> q, k, v, attn, lse;
};

// InvalidArgument for sizes < 1, an odd head_dim, window < 0, a rope table that does not fit
// (rope.seq_len < T or head_dim != 2 rope.half), the head rule of check_tp_heads (naming
// model.n_heads / model.n_kv_heads), or with SP tp not dividing B T.
Status check_tp_attention(const TpAttentionShape& shape, const ops::RopeTable& rope, int tp);

// x: (n, D), or (n/tp, D) with SP -> y: the same shape (overwritten); fills acts. rope is
// ops::make_rope_table(>= T, hd, theta), the same on every rank.
Status tp_attention_forward(comm::Communicator& tp, const TpAttentionShape& shape,
                            const ops::RopeTable& rope, const TpAttentionWeights& w,
                            const float* x, TpAttentionActs& acts, float* y);

// x and acts as the forward had them; dy shaped like y. Accumulates dx (shaped like x, may be
// null) and the four local weight gradients.
Status tp_attention_backward(comm::Communicator& tp, const TpAttentionShape& shape,
                             const ops::RopeTable& rope, const TpAttentionWeights& w,
                             const float* x, const TpAttentionActs& acts, const float* dy,
                             float* dx, const TpAttentionGrads& grads);

}  // namespace ms::parallel
