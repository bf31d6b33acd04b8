// Private to kernels/attention*.cu: the 32 x 32 tile machinery the forward and backward
// kernels share (token metadata and mask tests, tile loads, the tile inner products, the
// row reductions), the Problem they read, and the entry points' common argument checks.
//
// A thread block of 256 threads works on 32 x 32 (query, key) tiles staged in shared memory: the
// 8 threads of a tile row each own 4 of its columns for the scores and every 8th element of the
// row's head_dim accumulator, so a row's softmax statistics are reduced with three shuffles
// inside one warp. The inner products are plain f32 loops over shared memory, kept in
// tile_dots() so a tensor-core (bf16 mma) version can replace them without touching the
// masking and softmax around them.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/cuda_check.h"
#include "core/status.h"
#include "kernels/attention.cuh"
#include "kernels/launch.h"
#include "ops/attention.h"

namespace ms::kernels::attention_tiles {

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

__device__ inline int64_t q_offset(const Problem& p, int64_t b, int64_t t, int64_t h) {
  return ((b * p.tq + t) * p.heads + h) * p.hd;
}
__device__ inline int64_t kv_offset(const Problem& p, int64_t b, int64_t t, int64_t g) {
  return ((b * p.tk + t) * p.kv_heads + g) * p.hd;
}
__device__ inline int64_t lse_offset(const Problem& p, int64_t b, int64_t h, int64_t t) {
  return (b * p.heads + h) * p.tq + t;
}

__device__ inline int64_t token_id(const ops::TokenIds& ids, int64_t n) {
  return ids.i32 != nullptr ? static_cast<int64_t>(ids.i32[n]) : ids.i64[n];
}

__device__ inline int64_t warp_min(int64_t v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const int64_t other = __shfl_xor_sync(kFullMask, v, offset);
    v = other < v ? other : v;
  }
  return v;
}
__device__ inline int64_t warp_max(int64_t v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const int64_t other = __shfl_xor_sync(kFullMask, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// Warp 0 loads the tokens [t0, t0 + 32) of batch row b (of t tokens, indices `index`, documents
// `doc`) and their range. The caller synchronizes before reading.
__device__ inline void load_tokens(TileTokens& tiles, const int64_t* index,
                                   const ops::TokenIds& doc, bool docs, int64_t b, int64_t t,
                                   int64_t t0) {
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
__device__ inline bool tiles_meet(const Problem& p, const Range& q, const Range& k) {
  if (q.lo > q.hi || k.lo > k.hi) return false;  // a tile with no valid token
  if (k.lo > q.hi) return false;
  if (p.window > 0 && k.hi <= q.lo - p.window) return false;
  if (p.docs && (k.doc_hi < q.doc_lo || k.doc_lo > q.doc_hi)) return false;
  return true;
}

__device__ inline bool sees(const Problem& p, const TileTokens& qt, int i, const TileTokens& kt,
                            int j) {
  if (!qt.valid[i] || !kt.valid[j]) return false;
  const int64_t qi = qt.pos[i], kj = kt.pos[j];
  return kj <= qi && (p.window == 0 || kj > qi - p.window) && (!p.docs || kt.doc[j] == qt.doc[i]);
}

// dst (32 rows, stride ld) <- `rows` rows of hd floats from src (stride row_stride) times
// scale; rows past `rows` are zero, so they add nothing to any product.
__device__ inline void load_rows(float* dst, int ld, const float* src, int64_t row_stride,
                                 int64_t rows, int hd, float scale) {
  for (int idx = threadIdx.x; idx < kTile * hd; idx += kThreads) {
    const int r = idx / hd, d = idx % hd;
    dst[r * ld + d] = r < rows ? src[r * row_stride + d] * scale : 0.0f;
  }
}

// out[c] = a[row] . b[col(c)] over hd, for this thread's 4 columns col(c) = lane8 + 8c: the one
// place a tile's inner products are formed (a tensor-core variant replaces this).
__device__ inline void tile_dots(const float* a, const float* b, int ld, int hd, int row, int lane8,
                                 float out[kColsPerThread]) {
  for (int c = 0; c < kColsPerThread; ++c) out[c] = 0.0f;
  const float* a_row = a + row * ld;
  for (int d = 0; d < hd; ++d) {
    const float x = a_row[d];
    for (int c = 0; c < kColsPerThread; ++c) out[c] += x * b[(lane8 + kRowThreads * c) * ld + d];
  }
}

// Reductions over the 8 threads of a tile row (aligned groups of 8 lanes of one warp).
__device__ inline float row_max(float v) {
  for (int offset = kRowThreads / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}
__device__ inline float row_sum(float v) {
  for (int offset = kRowThreads / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

// Shared memory: `tiles` row tiles of 32 x (hd + 1) floats (the +1 keeps the column reads of
// tile_dots on distinct banks), then `squares` 32 x 33 score tiles.
inline size_t shared_bytes(int64_t hd, int tiles, int squares) {
  return sizeof(float) * (static_cast<size_t>(tiles) * kTile * (hd + 1) +
                          static_cast<size_t>(squares) * kTile * (kTile + 1));
}

// ---- Host side ----

inline unsigned row_warp_blocks(int64_t rows) {
  return blocks_for(static_cast<size_t>(rows) * 32, kMaxElementwiseBlocks);
}

// Element counts of the (batch, Tq, heads, head_dim), (batch, Tk, kv_heads, head_dim) and
// (batch, heads, Tq) arrays.
struct Counts {
  size_t q, kv, lse;
};

// Checks common to the three entry points; fills p's sizes and the counts.
inline Status check_shape(const char* op, const ops::AttentionShape& s, Problem& p, Counts& n) {
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
  n = Counts{static_cast<size_t>(p.batch * p.tq * p.heads * p.hd),
             static_cast<size_t>(p.batch * p.tk * p.kv_heads * p.hd),
             static_cast<size_t>(p.batch * p.heads * p.tq)};
  return Status::OK();
}

struct Operand {
  const char* name;
  const float* data;
  size_t count;
};
inline Status check_operands(const char* op, std::initializer_list<Operand> operands) {
  for (const Operand& o : operands) MS_RETURN_IF_ERROR(check_buffer(op, o.name, o.data, o.count));
  return Status::OK();
}

inline Status check_mask(const char* op, const ops::AttentionMask& mask, Problem& p) {
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

using TileKernel = void (*)(Problem);

// The kernel of the smallest head_dim bucket (32, 64, 128, 256) that holds hd.
inline TileKernel by_head_dim(int64_t hd, TileKernel k32, TileKernel k64, TileKernel k128,
                              TileKernel k256) {
  return hd <= 32 ? k32 : hd <= 64 ? k64 : hd <= 128 ? k128 : k256;
}

// Launches a tile kernel with `smem` bytes of dynamic shared memory (raising the kernel's limit
// past the default 48 KB where needed).
inline Status launch_tiles(TileKernel kernel, size_t smem, dim3 grid, const Problem& p,
                           cudaStream_t stream) {
  if (smem > kDefaultSharedBytes) {
    MS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  }
  kernel<<<grid, kThreads, smem, stream>>>(p);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

inline unsigned tiles_of(int64_t t) { return static_cast<unsigned>((t + kTile - 1) / kTile); }

}  // namespace ms::kernels::attention_tiles
