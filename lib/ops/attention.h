// Scaled-dot-product attention with grouped-query heads under a general causal mask, computed
// flash-attention style (Dao et al. 2022): queries and keys are taken in tiles of `block`
// tokens, the softmax is accumulated online over key tiles, and only the per-row log-sum-exp is
// kept for the backward, which recomputes the probabilities tile by tile. No (Tq x Tk) score
// matrix is ever stored; working memory is a few (block x block) tiles per thread.
//
// Query head h reads key/value head h / (heads / kv_heads). Scores are scaled by
// 1 / sqrt(head_dim). Which keys a query sees is given by global token indices (an
// AttentionMask): query i sees key j iff
//   k_index[j] <= q_index[i],
//   and, when window > 0, k_index[j] > q_index[i] - window (the `window` most recent tokens,
//   itself included),
//   and, when document ids are given, k_doc[j] == q_doc[i].
// attention_forward / attention_backward are the special case of one sequence attending to
// itself at indices 0..seq-1 with no documents.
//
// Blocks (ring attention, context parallelism): attention_block_forward computes a block of
// queries against one block of keys, normalized over that block only; attention_merge folds
// such partial results into an accumulator (an exact online-softmax merge), so the blocks may
// come in any order. attention_block_backward takes the FINAL (merged) out and lse and adds
// one key block's share of dQ, dK, dV; summed over the key blocks it is the full backward.
//
// Tile skipping: a (query tile, key tile) pair whose keys are all hidden from all its queries
// (judged from each tile's smallest and largest index and document id) is skipped, and a pair
// that is all visible skips the per-element mask. Indices are increasing inside a block in
// every caller (a block may be two contiguous runs, as a cp rank's chunks r and 2cp-1-r are),
// which keeps tile ranges tight; correctness does not depend on it.
//
// Rows that see no key at all get lse = -inf and out = 0, and contribute no gradient.
//
// Determinism: the forward and the dQ pass are split by (batch, head, query tile) and the dK/dV
// pass by (batch, kv head, key tile); each output element is summed by one thread in a fixed
// order.
#pragma once

#include <cstdint>

namespace ms::ops {

struct AttentionShape {
  int64_t batch = 1;
  int64_t seq = 1;       // queries per batch row (Tq)
  int64_t heads = 1;
  int64_t kv_heads = 1;  // divides heads
  int64_t head_dim = 1;
  int64_t window = 0;    // 0: full causal
  int64_t block = 64;    // tile size in tokens
  int64_t kv_seq = 0;    // keys per batch row (Tk); 0: equal to seq

  int64_t keys() const { return kv_seq > 0 ? kv_seq : seq; }  // Tk
  int64_t q_elements() const { return batch * seq * heads * head_dim; }    // q, out, dout
  int64_t kv_elements() const { return batch * keys() * kv_heads * head_dim; }  // k, v
};

// Optional per-token ids of either width (document ids); null when absent.
struct TokenIds {
  const int32_t* i32 = nullptr;
  const int64_t* i64 = nullptr;
  bool present() const { return i32 != nullptr || i64 != nullptr; }
  int64_t operator[](int64_t n) const { return i32 != nullptr ? i32[n] : i64[n]; }
};

// Who sees whom, per batch row b: q_index[b * Tq + i] is the global token index (position in
// the packed sequence) of query i, k_index[b * Tk + j] that of key j; a null index means
// 0..Tq-1 (0..Tk-1). q_doc / k_doc, laid out the same way, are document ids; when given (both
// or neither), a query only sees keys of its own document. The window is AttentionShape's.
struct AttentionMask {
  const int64_t* q_index = nullptr;
  const int64_t* k_index = nullptr;
  TokenIds q_doc;
  TokenIds k_doc;
};

// q: (batch, seq, heads, head_dim), k, v: (batch, seq, kv_heads, head_dim) ->
// out: (batch, seq, heads, head_dim), lse: (batch, heads, seq) natural-log sum of exp scores.
void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                       float* out, float* lse);

// dout like out. Accumulates dq, dk, dv (shaped like q, k, v). out and lse from the forward.
void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const float* out, const float* lse, const float* dout, float* dq,
                        float* dk, float* dv);

// q: (batch, Tq, heads, head_dim), k, v: (batch, Tk, kv_heads, head_dim) -> out: (batch, Tq,
// heads, head_dim) normalized over this block's visible keys, lse: (batch, heads, Tq)
// (-inf, with out 0, for rows that see none of these keys). Overwrites out and lse.
void attention_block_forward(const AttentionShape& s, const AttentionMask& mask, const float* q,
                             const float* k, const float* v, float* out, float* lse);

// Folds a block result (out_b, lse_b) into the accumulator (out, lse), both shaped as
// attention_block_forward's outputs (batch, seq, heads, head_dim heads and (batch, heads, seq)):
//   lse' = log(exp(lse) + exp(lse_b)),  out' = out exp(lse - lse') + out_b exp(lse_b - lse').
// An accumulator starts as out = 0, lse = -inf (or as a copy of the first block's result).
void attention_merge(const AttentionShape& s, const float* out_b, const float* lse_b, float* out,
                     float* lse);

// One key block's share of the backward. out and lse are the final forward results over all
// key blocks (attention_merge's accumulator), dout like out. Accumulates dq (batch, Tq, heads,
// head_dim) and this block's dk, dv (batch, Tk, kv_heads, head_dim).
void attention_block_backward(const AttentionShape& s, const AttentionMask& mask, const float* q,
                              const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv);

}  // namespace ms::ops
