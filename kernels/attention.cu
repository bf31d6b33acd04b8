// Flash-style attention kernels (Dao et al.; the backward split as in FlashAttention-2). A
// thread block of 256 threads works on 32 x 32 (query, key) tiles staged in shared memory: the
// 8 threads of a tile row each own 4 of its columns for the scores and every 8th element of the
// row's head_dim accumulator, so a row's softmax statistics are reduced with three shuffles
// inside one warp. The inner products are plain f32 loops over shared memory, kept in
// tile_dots() so a tensor-core (bf16 mma) version can replace them without touching the
// masking and softmax around them.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "core/cuda_check.h"
#include "kernels/attention.cuh"
#include "kernels/launch.h"

namespace ms::kernels {
namespace {

constexpr int kTile = 32;       // queries and keys per tile
constexpr int kRowThreads = 8;  // threads sharing one tile row
constexpr int kColsPerThread = kTile / kRowThreads;
constexpr int kThreads = static_cast<int>(kBlockThreads);
static_assert(kThreads == kTile * kRowThreads, "one block covers a tile's rows exactly");
static_assert(kTile == 32, "a tile's token metadata is loaded and reduced by one warp");
constexpr unsigned kFullMask = 0xffffffffu;
constexpr size_t kDefaultSharedBytes = 48 * 1024;
// Identities of the range reductions (numeric_limits is host-only without relaxed constexpr).
constexpr int64_t kMax = INT64_MAX;
constexpr int64_t kMin = INT64_MIN;

// The smallest and largest index and document id of a tile's valid tokens (empty: lo > hi).
struct Range {
  int64_t lo, hi, doc_lo, doc_hi;
};

// Global index, document id and validity of a tile's tokens, and their range.
struct TileTokens {
  int64_t pos[kTile];
  int64_t doc[kTile];
  bool valid[kTile];
  Range range;
};

// Everything the kernels read; one struct so the three kernels take the same argument.
struct Problem {
  int64_t batch, tq, tk, heads, kv_heads, hd, window;
  ops::AttentionMask mask;
  bool docs;
  float scale;  // 1 / sqrt(head_dim), rounded as the CPU rounds it
  const float *q, *k, *v, *out, *lse, *dout, *delta;
  float *out_w, *lse_w, *dq, *dk, *dv;
};

__device__ int64_t q_offset(const Problem& p, int64_t b, int64_t t, int64_t h) {
  return ((b * p.tq + t) * p.heads + h) * p.hd;
}
__device__ int64_t kv_offset(const Problem& p, int64_t b, int64_t t, int64_t g) {
  return ((b * p.tk + t) * p.kv_heads + g) * p.hd;
}
__device__ int64_t lse_offset(const Problem& p, int64_t b, int64_t h, int64_t t) {
  return (b * p.heads + h) * p.tq + t;
}

__device__ int64_t token_id(const ops::TokenIds& ids, int64_t n) {
  return ids.i32 != nullptr ? static_cast<int64_t>(ids.i32[n]) : ids.i64[n];
}

__device__ int64_t warp_min(int64_t v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const int64_t other = __shfl_xor_sync(kFullMask, v, offset);
    v = other < v ? other : v;
  }
  return v;
}
__device__ int64_t warp_max(int64_t v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const int64_t other = __shfl_xor_sync(kFullMask, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// Warp 0 loads the tokens [t0, t0 + 32) of batch row b (of t tokens, indices `index`, documents
// `doc`) and their range. The caller synchronizes before reading.
__device__ void load_tokens(TileTokens& tiles, const int64_t* index, const ops::TokenIds& doc,
                            bool docs, int64_t b, int64_t t, int64_t t0) {
  if (threadIdx.x >= kTile) return;
  const int i = threadIdx.x;
  const bool valid = t0 + i < t;
  const int64_t n = b * t + t0 + i;
  const int64_t pos = !valid ? 0 : (index != nullptr ? index[n] : t0 + i);
  const int64_t id = valid && docs ? token_id(doc, n) : 0;
  tiles.pos[i] = pos;
  tiles.doc[i] = id;
  tiles.valid[i] = valid;
  const int64_t lo = warp_min(valid ? pos : kMax), hi = warp_max(valid ? pos : kMin);
  const int64_t doc_lo = warp_min(valid ? id : kMax), doc_hi = warp_max(valid ? id : kMin);
  if (i == 0) tiles.range = Range{lo, hi, doc_lo, doc_hi};
}

// False when no query of the tile can see any key of the other (the CPU's Cover::kNone).
__device__ bool tiles_meet(const Problem& p, const Range& q, const Range& k) {
  if (q.lo > q.hi || k.lo > k.hi) return false;  // a tile with no valid token
  if (k.lo > q.hi) return false;
  if (p.window > 0 && k.hi <= q.lo - p.window) return false;
  if (p.docs && (k.doc_hi < q.doc_lo || k.doc_lo > q.doc_hi)) return false;
  return true;
}

__device__ bool sees(const Problem& p, const TileTokens& qt, int i, const TileTokens& kt, int j) {
  if (!qt.valid[i] || !kt.valid[j]) return false;
  const int64_t qi = qt.pos[i], kj = kt.pos[j];
  return kj <= qi && (p.window == 0 || kj > qi - p.window) && (!p.docs || kt.doc[j] == qt.doc[i]);
}

// dst (32 rows, stride ld) <- `rows` rows of hd floats from src (stride row_stride) times
// scale; rows past `rows` are zero, so they add nothing to any product.
__device__ void load_rows(float* dst, int ld, const float* src, int64_t row_stride, int64_t rows,
                          int hd, float scale) {
  for (int idx = threadIdx.x; idx < kTile * hd; idx += kThreads) {
    const int r = idx / hd, d = idx % hd;
    dst[r * ld + d] = r < rows ? src[r * row_stride + d] * scale : 0.0f;
  }
}

// out[c] = a[row] . b[col(c)] over hd, for this thread's 4 columns col(c) = lane8 + 8c: the one
// place a tile's inner products are formed (a tensor-core variant replaces this).
__device__ void tile_dots(const float* a, const float* b, int ld, int hd, int row, int lane8,
                          float out[kColsPerThread]) {
  for (int c = 0; c < kColsPerThread; ++c) out[c] = 0.0f;
  const float* a_row = a + row * ld;
  for (int d = 0; d < hd; ++d) {
    const float x = a_row[d];
    for (int c = 0; c < kColsPerThread; ++c) out[c] += x * b[(lane8 + kRowThreads * c) * ld + d];
  }
}

// Reductions over the 8 threads of a tile row (aligned groups of 8 lanes of one warp).
__device__ float row_max(float v) {
  for (int offset = kRowThreads / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}
__device__ float row_sum(float v) {
  for (int offset = kRowThreads / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

// Shared memory: `tiles` row tiles of 32 x (hd + 1) floats (the +1 keeps the column reads of
// tile_dots on distinct banks), then `squares` 32 x 33 score tiles.
size_t shared_bytes(int64_t hd, int tiles, int squares) {
  return sizeof(float) * (static_cast<size_t>(tiles) * kTile * (hd + 1) +
                          static_cast<size_t>(squares) * kTile * (kTile + 1));
}

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

// ---- Host side ----

unsigned row_warp_blocks(int64_t rows) {
  return blocks_for(static_cast<size_t>(rows) * 32, kMaxElementwiseBlocks);
}

// Checks common to the three entry points; fills p's sizes.
Status check_shape(const char* op, const ops::AttentionShape& s, Problem& p) {
  if (s.batch < 0 || s.seq < 0 || s.kv_seq < 0) {
    return InvalidArgument(std::string(op) + ": batch, seq and kv_seq must not be negative");
  }
  if (s.heads <= 0 || s.kv_heads <= 0 || s.heads % s.kv_heads != 0) {
    return InvalidArgument(std::string(op) + ": heads (" + std::to_string(s.heads) +
                           ") must be a positive multiple of kv_heads (" +
                           std::to_string(s.kv_heads) + ")");
  }
  if (s.head_dim <= 0 || s.head_dim > kMaxAttentionHeadDim) {
    return InvalidArgument(std::string(op) + ": head_dim " + std::to_string(s.head_dim) +
                           " is outside 1.." + std::to_string(kMaxAttentionHeadDim));
  }
  if (s.window < 0) return InvalidArgument(std::string(op) + ": window must not be negative");
  if (s.heads > 65535 || s.kv_heads > 65535 || s.batch > 65535) {
    return InvalidArgument(std::string(op) + ": batch and heads must be at most 65535");
  }
  p = Problem{};
  p.batch = s.batch;
  p.tq = s.seq;
  p.tk = s.kv_seq > 0 ? s.kv_seq : s.seq;
  p.heads = s.heads;
  p.kv_heads = s.kv_heads;
  p.hd = s.head_dim;
  p.window = s.window;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  return Status::OK();
}

Status check_mask(const char* op, const ops::AttentionMask& mask, Problem& p) {
  if (mask.q_doc.present() != mask.k_doc.present()) {
    return InvalidArgument(
        std::string(op) + ": mask has document ids for " +
        (mask.q_doc.present() ? "queries but not keys" : "keys but not queries"));
  }
  MS_RETURN_IF_ERROR(check_buffer(op, "mask.q_index", mask.q_index, 0));
  MS_RETURN_IF_ERROR(check_buffer(op, "mask.k_index", mask.k_index, 0));
  MS_RETURN_IF_ERROR(check_buffer(op, "mask.q_doc.i32", mask.q_doc.i32, 0));
  MS_RETURN_IF_ERROR(check_buffer(op, "mask.q_doc.i64", mask.q_doc.i64, 0));
  MS_RETURN_IF_ERROR(check_buffer(op, "mask.k_doc.i32", mask.k_doc.i32, 0));
  MS_RETURN_IF_ERROR(check_buffer(op, "mask.k_doc.i64", mask.k_doc.i64, 0));
  p.mask = mask;
  p.docs = mask.q_doc.present();
  return Status::OK();
}

// Launches kernel<kMaxHd> for the smallest kMaxHd >= hd, with `smem` bytes of dynamic shared
// memory (raising the kernel's limit past the default 48 KB where needed).
template <template <int> class Launcher>
Status launch_for_head_dim(int64_t hd, size_t smem, dim3 grid, const Problem& p,
                           cudaStream_t stream) {
  if (hd <= 32) return Launcher<32>::run(smem, grid, p, stream);
  if (hd <= 64) return Launcher<64>::run(smem, grid, p, stream);
  if (hd <= 128) return Launcher<128>::run(smem, grid, p, stream);
  return Launcher<256>::run(smem, grid, p, stream);
}

template <typename Kernel>
Status launch_tiles(Kernel kernel, size_t smem, dim3 grid, const Problem& p, cudaStream_t stream) {
  if (smem > kDefaultSharedBytes) {
    MS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  }
  kernel<<<grid, kThreads, smem, stream>>>(p);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

template <int kMaxHd>
struct ForwardLauncher {
  static Status run(size_t smem, dim3 grid, const Problem& p, cudaStream_t stream) {
    return launch_tiles(forward_kernel<kMaxHd>, smem, grid, p, stream);
  }
};
template <int kMaxHd>
struct KeyTileLauncher {
  static Status run(size_t smem, dim3 grid, const Problem& p, cudaStream_t stream) {
    return launch_tiles(key_tile_backward_kernel<kMaxHd>, smem, grid, p, stream);
  }
};
template <int kMaxHd>
struct QueryTileLauncher {
  static Status run(size_t smem, dim3 grid, const Problem& p, cudaStream_t stream) {
    return launch_tiles(query_tile_backward_kernel<kMaxHd>, smem, grid, p, stream);
  }
};

unsigned tiles_of(int64_t t) { return static_cast<unsigned>((t + kTile - 1) / kTile); }

}  // namespace

Status attention_block_forward(const ops::AttentionShape& s, const ops::AttentionMask& mask,
                               const float* q, const float* k, const float* v, float* out,
                               float* lse, Stream stream) {
  constexpr const char* kOp = "kernels::attention_block_forward";
  Problem p;
  MS_RETURN_IF_ERROR(check_shape(kOp, s, p));
  MS_RETURN_IF_ERROR(check_mask(kOp, mask, p));
  const size_t q_count = static_cast<size_t>(p.batch * p.tq * p.heads * p.hd);
  const size_t kv_count = static_cast<size_t>(p.batch * p.tk * p.kv_heads * p.hd);
  const size_t lse_count = static_cast<size_t>(p.batch * p.heads * p.tq);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "q", q, q_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "k", k, kv_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "v", v, kv_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "out", out, q_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "lse", lse, lse_count));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "out", out, q_count * sizeof(float), "lse", lse,
                                    lse_count * sizeof(float)));
  if (q_count == 0) return Status::OK();
  p.q = q;
  p.k = k;
  p.v = v;
  p.out_w = out;
  p.lse_w = lse;
  const dim3 grid(tiles_of(p.tq), static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch));
  return launch_for_head_dim<ForwardLauncher>(p.hd, shared_bytes(p.hd, 3, 1), grid, p,
                                              static_cast<cudaStream_t>(stream));
}

Status attention_merge(const ops::AttentionShape& s, const float* out_b, const float* lse_b,
                       float* out, float* lse, Stream stream) {
  constexpr const char* kOp = "kernels::attention_merge";
  Problem p;
  MS_RETURN_IF_ERROR(check_shape(kOp, s, p));
  const size_t out_count = static_cast<size_t>(p.batch * p.tq * p.heads * p.hd);
  const size_t lse_count = static_cast<size_t>(p.batch * p.heads * p.tq);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "out_b", out_b, out_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "lse_b", lse_b, lse_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "out", out, out_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "lse", lse, lse_count));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "out", out, out_count * sizeof(float), "out_b", out_b,
                                    out_count * sizeof(float)));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "lse", lse, lse_count * sizeof(float), "lse_b", lse_b,
                                    lse_count * sizeof(float)));
  if (out_count == 0) return Status::OK();
  p.out_w = out;
  p.lse_w = lse;
  const int64_t rows = p.batch * p.tq * p.heads;
  merge_kernel<<<row_warp_blocks(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p, out_b,
                                                                                          lse_b);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status attention_block_backward(const ops::AttentionShape& s, const ops::AttentionMask& mask,
                                const float* q, const float* k, const float* v, const float* out,
                                const float* lse, const float* dout, float* dq, float* dk,
                                float* dv, Stream stream) {
  constexpr const char* kOp = "kernels::attention_block_backward";
  Problem p;
  MS_RETURN_IF_ERROR(check_shape(kOp, s, p));
  MS_RETURN_IF_ERROR(check_mask(kOp, mask, p));
  const size_t q_count = static_cast<size_t>(p.batch * p.tq * p.heads * p.hd);
  const size_t kv_count = static_cast<size_t>(p.batch * p.tk * p.kv_heads * p.hd);
  const size_t lse_count = static_cast<size_t>(p.batch * p.heads * p.tq);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "q", q, q_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "k", k, kv_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "v", v, kv_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "out", out, q_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "lse", lse, lse_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dout", dout, q_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dq", dq, q_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dk", dk, kv_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dv", dv, kv_count));
  MS_RETURN_IF_ERROR(
      check_disjoint(kOp, "dk", dk, kv_count * sizeof(float), "dv", dv, kv_count * sizeof(float)));
  if (q_count == 0) return Status::OK();
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
  MS_CUDA_CHECK(cudaMallocAsync(&workspace, lse_count * sizeof(float), cuda_stream));
  auto* delta = static_cast<float*>(workspace);
  p.delta = delta;
  Status launched = Status::OK();
  row_delta_kernel<<<row_warp_blocks(p.batch * p.tq * p.heads), kThreads, 0, cuda_stream>>>(p,
                                                                                            delta);
  const cudaError_t delta_error = cudaGetLastError();
  if (delta_error != cudaSuccess) {
    launched = cuda_error(delta_error, "row_delta_kernel<<<...>>>", __FILE__, __LINE__);
  }
  const size_t smem = shared_bytes(p.hd, 4, 2);
  if (launched.ok()) {
    const dim3 key_grid(tiles_of(p.tk), static_cast<unsigned>(p.kv_heads),
                        static_cast<unsigned>(p.batch));
    launched = launch_for_head_dim<KeyTileLauncher>(p.hd, smem, key_grid, p, cuda_stream);
  }
  if (launched.ok()) {
    const dim3 query_grid(tiles_of(p.tq), static_cast<unsigned>(p.heads),
                          static_cast<unsigned>(p.batch));
    launched = launch_for_head_dim<QueryTileLauncher>(p.hd, smem, query_grid, p, cuda_stream);
  }
  MS_CUDA_CHECK(cudaFreeAsync(workspace, cuda_stream));
  return launched;
}

}  // namespace ms::kernels
