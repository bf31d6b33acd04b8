// Decode attention over a paged key/value cache (vLLM's PagedAttention layout): each query
// token attends to the cached keys and values of its own sequence, which lie in fixed-size
// blocks of one layer's cache named by the sequence's block table, in any order in the arena.
// This is the attention of a cached (prefill or decode) pass; training's attention over a
// batch is ops/attention.h.
//
// A layer's cache is (num_blocks, kv_heads, block_size, head_dim) f32: within a block each kv
// head's positions are contiguous, so attention over one kv head reads its keys and values as
// a stream the hardware prefetchers follow. Position p of a sequence lives in block
// blocks[p / block_size], slot p % block_size.
//
// Query token i at position pos sees the cached positions first' .. pos of its sequence, where
// first' = max(first, pos - window + 1) under a sliding window and `first` otherwise (first is
// its document's start under document masking, else 0). Its own key and value must already be
// in the cache (paged_kv_store). Query head h reads kv head h / (heads / kv_heads); scores are
// scaled by 1 / sqrt(head_dim).
//
// Determinism: every output head is summed by one thread in position order, with dot products
// in a fixed lane order that depends only on head_dim, so the result does not depend on the
// number of threads, on the other tokens of the call, or on how the positions are split
// between blocks: a decode step gives bitwise the result of the prefill that saw the same
// positions.
#pragma once

#include <cstdint>

namespace ms::ops {

struct PagedAttentionShape {
  int64_t tokens = 1;       // query tokens of the call (N)
  int64_t heads = 1;
  int64_t kv_heads = 1;     // divides heads
  int64_t head_dim = 1;
  int64_t block_size = 16;  // positions per cache block
  int64_t window = 0;       // 0: every position from `first` on
};

// One query token: its position in its sequence, the sequence's block table (covering
// positions 0 .. pos), and the first position it may see.
struct PagedQuery {
  int64_t pos = 0;
  const int32_t* blocks = nullptr;
  int64_t first = 0;
};

// Writes each token's key and value at its position of the cache. k, v: (tokens, kv_heads,
// head_dim); k_cache, v_cache: one layer's cache. Tokens must not share a position of one
// sequence.
void paged_kv_store(const PagedAttentionShape& s, const PagedQuery* queries, const float* k,
                    const float* v, float* k_cache, float* v_cache);

// q: (tokens, heads, head_dim), queries: (tokens), k_cache, v_cache: one layer's cache ->
// out: (tokens, heads, head_dim), each token over its visible cached positions (at least its
// own). Overwrites out.
void paged_attention(const PagedAttentionShape& s, const PagedQuery* queries, const float* q,
                     const float* k_cache, const float* v_cache, float* out);

}  // namespace ms::ops
