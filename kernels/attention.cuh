// Flash-style masked attention on the GPU, f32: twins of lib/ops/attention.h's block forward,
// merge and block backward (ring attention's pieces), with the same names, argument order and
// semantics, on device pointers, plus the stream to enqueue on. Plain C++ declarations, so
// CPU-only code can include this header.
//
// Every pointer is a DEVICE pointer, the mask's too: ops::AttentionMask's q_index / k_index
// (int64, (batch, Tq) / (batch, Tk)) and q_doc / k_doc (int32 or int64 ops::TokenIds, same
// layouts) point to device memory; null members mean what they mean on the CPU (indices
// 0..T-1, no documents). AttentionShape::block (the CPU's tile) is not used: the kernels tile by
// 32 queries and 32 keys, which only changes rounding (tile skipping is an optimization).
//
// head_dim may be 1 .. kMaxAttentionHeadDim; larger is InvalidArgument. Dynamic shared memory
// grows with head_dim (about 140 KB for the backward at 256), within sm_80's and sm_90's limits.
//
// Determinism: the forward and the dQ pass run one thread block per (batch, head, 32-query
// tile), the dK/dV pass one per (batch, kv head, 32-key tile) looping over the query heads of
// its group and the query tiles in order; every output element is summed by one thread in a
// fixed order and no float atomics are used, so two runs give the same bits. Results agree with
// the CPU within f32 rounding of differently ordered sums (tests: 1e-5 relative).
//
// Each entry point checks its arguments (null or misaligned pointers for non-empty shapes,
// non-positive heads / kv_heads / head_dim, heads not a multiple of kv_heads, negative sizes or
// window, only one of q_doc / k_doc, out overlapping lse) and returns InvalidArgument naming the
// op and argument before any CUDA call; batch or seq of 0 launches nothing.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kernels/device.h"
#include "ops/attention.h"

namespace ms::kernels {

inline constexpr int64_t kMaxAttentionHeadDim = 256;

// q: (batch, Tq, heads, head_dim), k, v: (batch, Tk, kv_heads, head_dim) -> out (batch, Tq,
// heads, head_dim) and lse (batch, heads, Tq), both overwritten; rows that see none of these
// keys get lse = -inf and out = 0.
Status attention_block_forward(const ops::AttentionShape& s, const ops::AttentionMask& mask,
                               const float* q, const float* k, const float* v, float* out,
                               float* lse, Stream stream = nullptr);

// Folds (out_b, lse_b) into the accumulator (out, lse) in place, exactly as
// ops::attention_merge (shapes (batch, seq, heads, head_dim) and (batch, heads, seq); a row with
// lse_b = -inf is left alone).
Status attention_merge(const ops::AttentionShape& s, const float* out_b, const float* lse_b,
                       float* out, float* lse, Stream stream = nullptr);

// One key block's share of the backward: out and lse are the final (merged) forward results,
// dout like out. ACCUMULATES into dq (like q) and dk, dv (like k, v). Workspace for the row
// terms dout . out (batch * heads * Tq floats) comes from the stream-ordered allocator and is
// released on the stream.
Status attention_block_backward(const ops::AttentionShape& s, const ops::AttentionMask& mask,
                                const float* q, const float* k, const float* v, const float* out,
                                const float* lse, const float* dout, float* dq, float* dk,
                                float* dv, Stream stream = nullptr);

}  // namespace ms::kernels
