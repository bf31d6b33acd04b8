// Attention over a paged key/value cache on the GPU, f32: twins of lib/ops/paged_attention.h
// (paged_kv_store, paged_attention) with the same names, argument order and semantics, on
// device pointers, plus the stream to enqueue on. Plain C++ declarations, so CPU-only code can
// include this header.
//
// `queries` is a DEVICE array of s.tokens ops::PagedQuery whose `blocks` members point to
// DEVICE block tables (int32, covering positions 0 .. pos of the token's sequence); the caches
// are one layer's (num_blocks, kv_heads, block_size, head_dim) arenas on the device.
//
// paged_attention is flash-decoding: a token's visible positions (counted from the first one
// it sees) are cut into chunks of 64 dealt round robin to 4 thread blocks per (token, query
// head), so one long sequence keeps several SMs busy; each block's 8 warps take a chunk's
// positions round robin, each with an online softmax, merged in warp order, and a second pass
// merges the 4 partial results in order (workspace from the stream-ordered allocator). The
// chunking and the order of every sum depend only on the token's own (pos, first, window) and
// head_dim, so the result does not depend on the other tokens of the call: a decode step gives
// bitwise the result of the prefill that saw the same positions, and two runs give the same
// bits. Agreement with the CPU twin is within f32 rounding of differently ordered sums (tests:
// 1e-5 relative).
//
// head_dim may be 1 .. kMaxPagedHeadDim. Each entry point checks its arguments (null or
// misaligned pointers, non-positive heads / kv_heads / head_dim / block_size, heads not a
// multiple of kv_heads, negative tokens or window) and returns InvalidArgument naming the op
// and argument before any CUDA call; tokens == 0 launches nothing. Block tables and positions
// are not checked (they live on the device): they must cover every stored or visible position.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kernels/device.h"
#include "ops/paged_attention.h"

namespace ms::kernels {

inline constexpr int64_t kMaxPagedHeadDim = 256;

// Writes each token's key and value (k, v: (tokens, kv_heads, head_dim)) at its position of
// k_cache / v_cache. Tokens must not share a position of one sequence.
Status paged_kv_store(const ops::PagedAttentionShape& s, const ops::PagedQuery* queries,
                      const float* k, const float* v, float* k_cache, float* v_cache,
                      Stream stream = nullptr);

// q: (tokens, heads, head_dim) -> out: (tokens, heads, head_dim), overwritten, each token over
// its visible cached positions (at least its own).
Status paged_attention(const ops::PagedAttentionShape& s, const ops::PagedQuery* queries,
                       const float* q, const float* k_cache, const float* v_cache, float* out,
                       Stream stream = nullptr);

}  // namespace ms::kernels
