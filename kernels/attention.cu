// Flash-style attention forward (Dao et al.) and the ring merge; the tile machinery is in
// attention_tiles.cuh, the backward in attention_backward.cu.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/cuda_check.h"
#include "kernels/attention.cuh"
#include "kernels/attention_tiles.cuh"
#include "kernels/launch.h"

namespace ms::kernels {
namespace {

using namespace attention_tiles;

// ---- Forward: one block per (batch, head, query tile), online softmax over key tiles ----
template <int kMaxHd>
__global__ void __launch_bounds__(kThreads) forward_kernel(Problem p) {
  constexpr int kDims = kMaxHd / kRowThreads;  // accumulator elements per thread
  extern __shared__ float smem[];
  __shared__ TileTokens q_tokens, k_tokens;
  const int hd = static_cast<int>(p.hd), ld = hd + 1;
  float* qs = smem;
  float* ks = qs + kTile * ld;
  float* vs = ks + kTile * ld;
  float* ps = vs + kTile * ld;
  const int64_t b = blockIdx.z, h = blockIdx.y, i0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t g = h / (p.heads / p.kv_heads);
  const int64_t nq = min(static_cast<int64_t>(kTile), p.tq - i0);
  const int row = threadIdx.x / kRowThreads, lane8 = threadIdx.x % kRowThreads;

  load_rows(qs, ld, p.q + q_offset(p, b, i0, h), p.heads * p.hd, nq, hd, p.scale);
  load_tokens(q_tokens, p.mask.q_index, p.mask.q_doc, p.docs, b, p.tq, i0);
  float acc[kDims];
#pragma unroll
  for (int c = 0; c < kDims; ++c) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t k_tiles = (p.tk + kTile - 1) / kTile;
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    const int64_t j0 = kt * kTile;
    __syncthreads();  // the previous tile's keys, values and probabilities are used up
    load_tokens(k_tokens, p.mask.k_index, p.mask.k_doc, p.docs, b, p.tk, j0);
    __syncthreads();
    if (!tiles_meet(p, q_tokens.range, k_tokens.range)) continue;  // uniform over the block
    const int64_t nk = min(static_cast<int64_t>(kTile), p.tk - j0);
    load_rows(ks, ld, p.k + kv_offset(p, b, j0, g), p.kv_heads * p.hd, nk, hd, 1.0f);
    load_rows(vs, ld, p.v + kv_offset(p, b, j0, g), p.kv_heads * p.hd, nk, hd, 1.0f);
    __syncthreads();
    float score[kColsPerThread];
    tile_dots(qs, ks, ld, hd, row, lane8, score);
    float tile_max = -INFINITY;
    for (int c = 0; c < kColsPerThread; ++c) {
      if (!sees(p, q_tokens, row, k_tokens, lane8 + kRowThreads * c)) score[c] = -INFINITY;
      tile_max = fmaxf(tile_max, score[c]);
    }
    const float m_new = fmaxf(m, row_max(tile_max));
    // A row that has seen nothing yet keeps m = -inf, l = 0 (exp(-inf - -inf) would be NaN).
    const float correction = m_new == -INFINITY ? 1.0f : expf(m - m_new);
    float sum = 0.0f;
    for (int c = 0; c < kColsPerThread; ++c) {
      const float prob = m_new == -INFINITY ? 0.0f : expf(score[c] - m_new);
      ps[row * (kTile + 1) + lane8 + kRowThreads * c] = prob;
      sum += prob;
    }
    l = l * correction + row_sum(sum);
    m = m_new;
    __syncwarp();  // a row's probabilities come from the 8 threads of the same warp
    const float* p_row = ps + row * (kTile + 1);
#pragma unroll
    for (int c = 0; c < kDims; ++c) {
      const int d = lane8 + kRowThreads * c;
      if (d >= hd) break;
      float pv = 0.0f;
      for (int j = 0; j < kTile; ++j) pv += p_row[j] * vs[j * ld + d];
      acc[c] = acc[c] * correction + pv;
    }
  }
  if (row >= nq) return;
  const bool seen = l > 0.0f;
  float* o = p.out_w + q_offset(p, b, i0 + row, h);
#pragma unroll
  for (int c = 0; c < kDims; ++c) {
    const int d = lane8 + kRowThreads * c;
    if (d < hd) o[d] = seen ? acc[c] / l : 0.0f;
  }
  if (lane8 == 0) p.lse_w[lse_offset(p, b, h, i0 + row)] = seen ? m + logf(l) : -INFINITY;
}

// ---- Merge: one warp per (batch, token, head) row ----
__global__ void merge_kernel(Problem p, const float* out_b, const float* lse_b) {
  const int64_t rows = p.batch * p.tq * p.heads;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t r = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32; r < rows;
       r += warps) {
    const int64_t h = r % p.heads, bt = r / p.heads;
    const int64_t li = lse_offset(p, bt / p.tq, h, bt % p.tq), row = r * p.hd;
    const float la = p.lse_w[li], lb = lse_b[li];
    if (lb == -INFINITY) continue;  // uniform over the warp
    float* o = p.out_w + row;
    const float* ob = out_b + row;
    float merged = lb;
    if (la == -INFINITY) {
      for (int64_t d = lane; d < p.hd; d += 32) o[d] = ob[d];
    } else {
      merged = fmaxf(la, lb) + log1pf(expf(-fabsf(la - lb)));
      const float wa = expf(la - merged), wb = expf(lb - merged);
      for (int64_t d = lane; d < p.hd; d += 32) o[d] = o[d] * wa + ob[d] * wb;
    }
    __syncwarp();  // every lane has read the old lse before it changes
    if (lane == 0) p.lse_w[li] = merged;
  }
}

}  // namespace

Status attention_block_forward(const ops::AttentionShape& s, const ops::AttentionMask& mask,
                               const float* q, const float* k, const float* v, float* out,
                               float* lse, Stream stream) {
  constexpr const char* kOp = "kernels::attention_block_forward";
  Problem p;
  Counts n;
  MS_RETURN_IF_ERROR(check_shape(kOp, s, p, n));
  MS_RETURN_IF_ERROR(check_mask(kOp, mask, p));
  MS_RETURN_IF_ERROR(check_operands(
      kOp,
      {{"q", q, n.q}, {"k", k, n.kv}, {"v", v, n.kv}, {"out", out, n.q}, {"lse", lse, n.lse}}));
  MS_RETURN_IF_ERROR(
      check_disjoint(kOp, "out", out, n.q * sizeof(float), "lse", lse, n.lse * sizeof(float)));
  if (n.q == 0) return Status::OK();
  p.q = q;
  p.k = k;
  p.v = v;
  p.out_w = out;
  p.lse_w = lse;
  const dim3 grid(tiles_of(p.tq), static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch));
  const TileKernel kernel = by_head_dim(p.hd, forward_kernel<32>, forward_kernel<64>,
                                        forward_kernel<128>, forward_kernel<256>);
  return launch_tiles(kernel, shared_bytes(p.hd, 3, 1), grid, p, static_cast<cudaStream_t>(stream));
}

Status attention_merge(const ops::AttentionShape& s, const float* out_b, const float* lse_b,
                       float* out, float* lse, Stream stream) {
  constexpr const char* kOp = "kernels::attention_merge";
  Problem p;
  Counts n;
  MS_RETURN_IF_ERROR(check_shape(kOp, s, p, n));
  MS_RETURN_IF_ERROR(check_operands(
      kOp,
      {{"out_b", out_b, n.q}, {"lse_b", lse_b, n.lse}, {"out", out, n.q}, {"lse", lse, n.lse}}));
  MS_RETURN_IF_ERROR(
      check_disjoint(kOp, "out", out, n.q * sizeof(float), "out_b", out_b, n.q * sizeof(float)));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "lse", lse, n.lse * sizeof(float), "lse_b", lse_b,
                                    n.lse * sizeof(float)));
  if (n.q == 0) return Status::OK();
  p.out_w = out;
  p.lse_w = lse;
  const int64_t rows = p.batch * p.tq * p.heads;
  merge_kernel<<<row_warp_blocks(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p, out_b,
                                                                                          lse_b);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

}  // namespace ms::kernels
