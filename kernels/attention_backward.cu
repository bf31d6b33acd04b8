// Attention backward, split as in FlashAttention-2 so that no output needs atomics: the row
// terms delta = rowsum(dout * out), then dK/dV by (batch, kv head, key tile) looping over the
// group's query heads and the query tiles, then dQ by (batch, head, query tile) looping over the
// key tiles. The tile machinery is in attention_tiles.cuh.
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

// ---- Backward ----

// delta[b, h, t] = dout . out of one query row, one warp per row (a fixed shuffle tree).
__global__ void row_delta_kernel(Problem p, float* delta) {
  const int64_t rows = p.batch * p.tq * p.heads;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t r = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32; r < rows;
       r += warps) {
    const float* o = p.out + r * p.hd;
    const float* g = p.dout + r * p.hd;
    float dot = 0.0f;
    for (int64_t d = lane; d < p.hd; d += 32) dot += o[d] * g[d];
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(kFullMask, dot, offset);
    const int64_t h = r % p.heads, bt = r / p.heads;
    if (lane == 0) delta[lse_offset(p, bt / p.tq, h, bt % p.tq)] = dot;
  }
}

// A query tile's per-row lse and delta (invalid rows: lse -inf, so they add nothing).
struct RowTerms {
  float lse[kTile];
  float delta[kTile];
};

__device__ void load_row_terms(RowTerms& terms, const Problem& p, int64_t b, int64_t h,
                               int64_t i0) {
  if (threadIdx.x >= kTile) return;
  const int64_t i = i0 + threadIdx.x;
  const bool valid = i < p.tq;
  terms.lse[threadIdx.x] = valid ? p.lse[lse_offset(p, b, h, i)] : -INFINITY;
  terms.delta[threadIdx.x] = valid ? p.delta[lse_offset(p, b, h, i)] : 0.0f;
}

// For this thread's row and 4 columns of a (query tile, key tile) pair: P = exp(S - lse) (0
// where masked or where the row sees nothing) into ps, and dS = P (dout . v - delta) into dss.
__device__ void probabilities_and_score_grads(const Problem& p, const float* qs, const float* ks,
                                              const float* dos, const float* vs, int ld,
                                              const TileTokens& q_tokens,
                                              const TileTokens& k_tokens, const RowTerms& terms,
                                              int row, int lane8, float* ps, float* dss) {
  const int hd = static_cast<int>(p.hd);
  float score[kColsPerThread], dp[kColsPerThread];
  tile_dots(qs, ks, ld, hd, row, lane8, score);
  tile_dots(dos, vs, ld, hd, row, lane8, dp);
  const float lse = terms.lse[row], delta = terms.delta[row];
  for (int c = 0; c < kColsPerThread; ++c) {
    const int j = lane8 + kRowThreads * c;
    const bool visible = lse != -INFINITY && sees(p, q_tokens, row, k_tokens, j);
    const float prob = visible ? expf(score[c] - lse) : 0.0f;
    ps[row * (kTile + 1) + j] = prob;
    dss[row * (kTile + 1) + j] = prob * (dp[c] - delta);
  }
}

// dK, dV of one (batch, kv head, key tile) over every query head of the group and every query
// tile that sees the keys, in that fixed order; added to dk, dv once at the end.
template <int kMaxHd>
__global__ void __launch_bounds__(kThreads) key_tile_backward_kernel(Problem p) {
  constexpr int kDims = kMaxHd / kRowThreads;
  extern __shared__ float smem[];
  __shared__ TileTokens q_tokens, k_tokens;
  __shared__ RowTerms terms;
  const int hd = static_cast<int>(p.hd), ld = hd + 1;
  float* ks = smem;
  float* vs = ks + kTile * ld;
  float* qs = vs + kTile * ld;
  float* dos = qs + kTile * ld;
  float* ps = dos + kTile * ld;
  float* dss = ps + kTile * (kTile + 1);
  const int64_t b = blockIdx.z, g = blockIdx.y, j0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t rep = p.heads / p.kv_heads;
  const int64_t nk = min(static_cast<int64_t>(kTile), p.tk - j0);
  const int row = threadIdx.x / kRowThreads, lane8 = threadIdx.x % kRowThreads;

  load_rows(ks, ld, p.k + kv_offset(p, b, j0, g), p.kv_heads * p.hd, nk, hd, 1.0f);
  load_rows(vs, ld, p.v + kv_offset(p, b, j0, g), p.kv_heads * p.hd, nk, hd, 1.0f);
  load_tokens(k_tokens, p.mask.k_index, p.mask.k_doc, p.docs, b, p.tk, j0);
  float dk_acc[kDims], dv_acc[kDims];
#pragma unroll
  for (int c = 0; c < kDims; ++c) dk_acc[c] = dv_acc[c] = 0.0f;
  const int64_t q_tiles = (p.tq + kTile - 1) / kTile;
  for (int64_t h = g * rep; h < (g + 1) * rep; ++h) {
    for (int64_t qt = 0; qt < q_tiles; ++qt) {
      const int64_t i0 = qt * kTile;
      __syncthreads();  // the previous query tile is used up
      load_tokens(q_tokens, p.mask.q_index, p.mask.q_doc, p.docs, b, p.tq, i0);
      __syncthreads();
      if (!tiles_meet(p, q_tokens.range, k_tokens.range)) continue;
      const int64_t nq = min(static_cast<int64_t>(kTile), p.tq - i0);
      load_rows(qs, ld, p.q + q_offset(p, b, i0, h), p.heads * p.hd, nq, hd, p.scale);
      load_rows(dos, ld, p.dout + q_offset(p, b, i0, h), p.heads * p.hd, nq, hd, 1.0f);
      load_row_terms(terms, p, b, h, i0);
      __syncthreads();
      // Here `row` is a query row of the tile.
      probabilities_and_score_grads(p, qs, ks, dos, vs, ld, q_tokens, k_tokens, terms, row, lane8,
                                    ps, dss);
      __syncthreads();
      // Here `row` is a key row: dV += P^T dO, dK += dS^T (Q / sqrt(hd)), queries in order.
      for (int i = 0; i < kTile; ++i) {
        const float prob = ps[i * (kTile + 1) + row], ds = dss[i * (kTile + 1) + row];
#pragma unroll
        for (int c = 0; c < kDims; ++c) {
          const int d = lane8 + kRowThreads * c;
          if (d >= hd) break;
          dv_acc[c] += prob * dos[i * ld + d];
          dk_acc[c] += ds * qs[i * ld + d];
        }
      }
    }
  }
  if (row >= nk) return;
  float* dk_row = p.dk + kv_offset(p, b, j0 + row, g);
  float* dv_row = p.dv + kv_offset(p, b, j0 + row, g);
#pragma unroll
  for (int c = 0; c < kDims; ++c) {
    const int d = lane8 + kRowThreads * c;
    if (d >= hd) break;
    dk_row[d] += dk_acc[c];
    dv_row[d] += dv_acc[c];
  }
}

// dQ of one (batch, head, query tile) over the key tiles it sees, in order; dq += scale * sum.
template <int kMaxHd>
__global__ void __launch_bounds__(kThreads) query_tile_backward_kernel(Problem p) {
  constexpr int kDims = kMaxHd / kRowThreads;
  extern __shared__ float smem[];
  __shared__ TileTokens q_tokens, k_tokens;
  __shared__ RowTerms terms;
  const int hd = static_cast<int>(p.hd), ld = hd + 1;
  float* qs = smem;
  float* dos = qs + kTile * ld;
  float* ks = dos + kTile * ld;
  float* vs = ks + kTile * ld;
  float* ps = vs + kTile * ld;
  float* dss = ps + kTile * (kTile + 1);
  const int64_t b = blockIdx.z, h = blockIdx.y, i0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t g = h / (p.heads / p.kv_heads);
  const int64_t nq = min(static_cast<int64_t>(kTile), p.tq - i0);
  const int row = threadIdx.x / kRowThreads, lane8 = threadIdx.x % kRowThreads;

  load_rows(qs, ld, p.q + q_offset(p, b, i0, h), p.heads * p.hd, nq, hd, p.scale);
  load_rows(dos, ld, p.dout + q_offset(p, b, i0, h), p.heads * p.hd, nq, hd, 1.0f);
  load_tokens(q_tokens, p.mask.q_index, p.mask.q_doc, p.docs, b, p.tq, i0);
  load_row_terms(terms, p, b, h, i0);
  float dq_acc[kDims];
#pragma unroll
  for (int c = 0; c < kDims; ++c) dq_acc[c] = 0.0f;
  const int64_t k_tiles = (p.tk + kTile - 1) / kTile;
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    const int64_t j0 = kt * kTile;
    __syncthreads();
    load_tokens(k_tokens, p.mask.k_index, p.mask.k_doc, p.docs, b, p.tk, j0);
    __syncthreads();
    if (!tiles_meet(p, q_tokens.range, k_tokens.range)) continue;
    const int64_t nk = min(static_cast<int64_t>(kTile), p.tk - j0);
    load_rows(ks, ld, p.k + kv_offset(p, b, j0, g), p.kv_heads * p.hd, nk, hd, 1.0f);
    load_rows(vs, ld, p.v + kv_offset(p, b, j0, g), p.kv_heads * p.hd, nk, hd, 1.0f);
    __syncthreads();
    probabilities_and_score_grads(p, qs, ks, dos, vs, ld, q_tokens, k_tokens, terms, row, lane8, ps,
                                  dss);
    __syncwarp();  // a row's dS comes from the 8 threads of the same warp
    const float* ds_row = dss + row * (kTile + 1);
#pragma unroll
    for (int c = 0; c < kDims; ++c) {
      const int d = lane8 + kRowThreads * c;
      if (d >= hd) break;
      float sum = 0.0f;
      for (int j = 0; j < kTile; ++j) sum += ds_row[j] * ks[j * ld + d];
      dq_acc[c] += sum;
    }
  }
  if (row >= nq) return;
  float* dq_row = p.dq + q_offset(p, b, i0 + row, h);
#pragma unroll
  for (int c = 0; c < kDims; ++c) {
    const int d = lane8 + kRowThreads * c;
    if (d < hd) dq_row[d] += p.scale * dq_acc[c];
  }
}

// The backward's three passes: row terms into `delta`, then dK/dV by key tile, dQ by query tile.
Status launch_backward(const Problem& p, float* delta, cudaStream_t stream) {
  row_delta_kernel<<<row_warp_blocks(p.batch * p.tq * p.heads), kThreads, 0, stream>>>(p, delta);
  MS_CUDA_CHECK(cudaGetLastError());
  const size_t smem = shared_bytes(p.hd, 4, 2);
  const auto batch = static_cast<unsigned>(p.batch);
  MS_RETURN_IF_ERROR(launch_tiles(
      by_head_dim(p.hd, key_tile_backward_kernel<32>, key_tile_backward_kernel<64>,
                  key_tile_backward_kernel<128>, key_tile_backward_kernel<256>),
      smem, dim3(tiles_of(p.tk), static_cast<unsigned>(p.kv_heads), batch), p, stream));
  return launch_tiles(
      by_head_dim(p.hd, query_tile_backward_kernel<32>, query_tile_backward_kernel<64>,
                  query_tile_backward_kernel<128>, query_tile_backward_kernel<256>),
      smem, dim3(tiles_of(p.tq), static_cast<unsigned>(p.heads), batch), p, stream);
}

}  // namespace

Status attention_block_backward(const ops::AttentionShape& s, const ops::AttentionMask& mask,
                                const float* q, const float* k, const float* v, const float* out,
                                const float* lse, const float* dout, float* dq, float* dk,
                                float* dv, Stream stream) {
  constexpr const char* kOp = "kernels::attention_block_backward";
  Problem p;
  Counts n;
  MS_RETURN_IF_ERROR(check_shape(kOp, s, p, n));
  MS_RETURN_IF_ERROR(check_mask(kOp, mask, p));
  MS_RETURN_IF_ERROR(check_operands(kOp, {{"q", q, n.q},
                                          {"k", k, n.kv},
                                          {"v", v, n.kv},
                                          {"out", out, n.q},
                                          {"lse", lse, n.lse},
                                          {"dout", dout, n.q},
                                          {"dq", dq, n.q},
                                          {"dk", dk, n.kv},
                                          {"dv", dv, n.kv}}));
  MS_RETURN_IF_ERROR(
      check_disjoint(kOp, "dk", dk, n.kv * sizeof(float), "dv", dv, n.kv * sizeof(float)));
  if (n.q == 0) return Status::OK();
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = out;
  p.lse = lse;
  p.dout = dout;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  void* workspace = nullptr;
  MS_CUDA_CHECK(cudaMallocAsync(&workspace, n.lse * sizeof(float), cuda_stream));
  p.delta = static_cast<float*>(workspace);
  const Status launched = launch_backward(p, static_cast<float*>(workspace), cuda_stream);
  MS_CUDA_CHECK(cudaFreeAsync(workspace, cuda_stream));
  return launched;
}

}  // namespace ms::kernels
