// Paged decode attention and the cache store (see paged_attention.cuh). A query head's visible
// positions are split into fixed chunks over 4 blocks and, inside a chunk, round robin over a
// block's 8 warps; a warp scores one position at a time (lanes over head_dim, a fixed shuffle
// tree) and keeps an online softmax; warps merge in warp order, blocks in split order, so every
// sum has a fixed order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/paged_attention.cuh"

namespace ms::kernels {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarps = static_cast<int>(kBlockThreads) / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;
// Flash-decoding: a token's visible positions are cut into chunks of kChunk, dealt round robin
// to kSplits blocks whose partial results a second pass merges. Both constants are fixed (not
// chosen per call), so how a token's sum is split and ordered depends only on its own positions
// and a decode step still repeats the prefill's bits.
constexpr int kChunk = 64;
constexpr unsigned kSplits = 4;
// Most tokens one pass of paged_attention takes (bounds its workspace to a few MB).
constexpr size_t kTokensPerPass = 128;

struct PagedArgs {
  int64_t tokens, heads, kv_heads, hd, block_size, window;
  float scale;  // 1 / sqrt(head_dim), rounded as the CPU rounds it (in float)
  const ops::PagedQuery* queries;
};

// Offset of (position pos, kv head kvh) of t's sequence in a layer's cache.
__device__ int64_t cache_offset(const PagedArgs& a, const ops::PagedQuery& t, int64_t pos,
                                int64_t kvh) {
  const int64_t block = t.blocks[pos / a.block_size];
  return ((block * a.kv_heads + kvh) * a.block_size + pos % a.block_size) * a.hd;
}

// One thread per stored element: k, v (tokens, kv_heads, head_dim) are walked in order.
__global__ void kv_store_kernel(PagedArgs a, const float* k, const float* v, float* k_cache,
                                float* v_cache) {
  const int64_t n = a.tokens * a.kv_heads * a.hd;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t d = i % a.hd, kvh = i / a.hd % a.kv_heads, token = i / (a.hd * a.kv_heads);
    const ops::PagedQuery t = a.queries[token];
    const int64_t at = cache_offset(a, t, t.pos, kvh) + d;
    k_cache[at] = k[i];
    v_cache[at] = v[i];
  }
}

// One block per (token, query head, split): split z takes the chunks z, z + kSplits, ... of
// kChunk visible positions (counted from the first visible one); inside a chunk the 8 warps take
// the positions round robin. Writes the split's unnormalized partial (max, sum, acc[head_dim])
// to `partials`; a split with no position writes sum 0.
template <int kMaxHd>
__global__ void __launch_bounds__(kBlockThreads)
    paged_attention_kernel(PagedArgs a, const float* q, const float* k_cache, const float* v_cache,
                           float* partials) {
  constexpr int kPerLane = kMaxHd / kWarpSize;
  __shared__ float part_max[kWarps], part_sum[kWarps];
  __shared__ float part_acc[kWarps][kMaxHd];
  const int64_t token = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
  const int64_t kvh = h / (a.heads / a.kv_heads);
  const ops::PagedQuery t = a.queries[token];
  const int64_t windowed = t.pos - a.window + 1;
  const int64_t first = a.window > 0 && windowed > t.first ? windowed : t.first;
  const int64_t visible = t.pos - first + 1;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int hd = static_cast<int>(a.hd);
  const float* q_row = q + (token * a.heads + h) * a.hd;
  float qv[kPerLane], acc[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int d = lane + kWarpSize * c;
    qv[c] = d < hd ? q_row[d] : 0.0f;
    acc[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t chunk = split * kChunk; chunk < visible; chunk += kSplits * kChunk) {
    const int64_t chunk_end = chunk + kChunk < visible ? chunk + kChunk : visible;
    for (int64_t n = chunk + warp; n < chunk_end; n += kWarps) {
      const int64_t at = cache_offset(a, t, first + n, kvh);
      const float* k_row = k_cache + at;
      const float* v_row = v_cache + at;
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) {
        const int d = lane + kWarpSize * c;
        if (d < hd) dot += qv[c] * k_row[d];
      }
      for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
        dot += __shfl_xor_sync(kFullMask, dot, offset);
      }
      const float score = dot * a.scale;
      const float m_new = fmaxf(m, score);
      const float correction = expf(m - m_new);  // 0 on the warp's first position
      const float prob = expf(score - m_new);
      l = l * correction + prob;
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) {
        const int d = lane + kWarpSize * c;
        if (d < hd) acc[c] = acc[c] * correction + prob * v_row[d];
      }
      m = m_new;
    }
  }
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int d = lane + kWarpSize * c;
    if (d < hd) part_acc[warp][d] = acc[c];
  }
  if (lane == 0) {
    part_max[warp] = m;
    part_sum[warp] = l;
  }
  __syncthreads();
  // Every thread folds the warps' (max, sum) the same way, in warp order; warps that saw no
  // position (l = 0) are left out.
  float max_all = -INFINITY;
  for (int w = 0; w < kWarps; ++w) {
    if (part_sum[w] > 0.0f) max_all = fmaxf(max_all, part_max[w]);
  }
  float weight[kWarps];
  float sum = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = part_sum[w] > 0.0f ? expf(part_max[w] - max_all) : 0.0f;
    sum += part_sum[w] * weight[w];
  }
  float* partial = partials + ((token * a.heads + h) * kSplits + split) * (a.hd + 2);
  if (threadIdx.x == 0) {
    partial[0] = max_all;
    partial[1] = sum;
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += part_acc[w][d] * weight[w];
    partial[2 + d] = o;
  }
}

// out = the splits' partials merged in split order, normalized; one thread per output element.
__global__ void combine_splits_kernel(PagedArgs a, const float* partials, float* out) {
  const int64_t n = a.tokens * a.heads * a.hd;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t d = i % a.hd, row = i / a.hd;  // row: token * heads + head
    const float* partial = partials + row * kSplits * (a.hd + 2);
    float max_all = -INFINITY;
    for (int z = 0; z < kSplits; ++z) {
      const float* p = partial + z * (a.hd + 2);
      if (p[1] > 0.0f) max_all = fmaxf(max_all, p[0]);
    }
    float sum = 0.0f, o = 0.0f;
    for (int z = 0; z < kSplits; ++z) {
      const float* p = partial + z * (a.hd + 2);
      const float weight = p[1] > 0.0f ? expf(p[0] - max_all) : 0.0f;
      sum += p[1] * weight;
      o += p[2 + d] * weight;
    }
    out[i] = o / sum;
  }
}

Status check_shape(const char* op, const ops::PagedAttentionShape& s) {
  const std::string name(op);
  if (s.tokens < 0) return InvalidArgument(name + ": tokens must not be negative");
  if (s.heads <= 0 || s.kv_heads <= 0 || s.heads % s.kv_heads != 0) {
    return InvalidArgument(name + ": heads (" + std::to_string(s.heads) +
                           ") must be a positive multiple of kv_heads (" +
                           std::to_string(s.kv_heads) + ")");
  }
  if (s.head_dim <= 0 || s.head_dim > kMaxPagedHeadDim) {
    return InvalidArgument(name + ": head_dim " + std::to_string(s.head_dim) + " is outside 1.." +
                           std::to_string(kMaxPagedHeadDim));
  }
  if (s.block_size <= 0) return InvalidArgument(name + ": block_size must be positive");
  if (s.window < 0) return InvalidArgument(name + ": window must not be negative");
  if (s.heads > 65535) return InvalidArgument(name + ": heads must be at most 65535");
  if (s.tokens > 0x7fffffff) return InvalidArgument(name + ": more than 2^31 - 1 tokens");
  return Status::OK();
}

// The split pass for the head_dim bucket of a.hd, then the combining pass.
Status launch_splits(const PagedArgs& a, const float* q, const float* k_cache, const float* v_cache,
                     float* partials, float* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.tokens), static_cast<unsigned>(a.heads), kSplits);
  if (a.hd <= 32) {
    paged_attention_kernel<32>
        <<<grid, kBlockThreads, 0, stream>>>(a, q, k_cache, v_cache, partials);
  } else if (a.hd <= 64) {
    paged_attention_kernel<64>
        <<<grid, kBlockThreads, 0, stream>>>(a, q, k_cache, v_cache, partials);
  } else if (a.hd <= 128) {
    paged_attention_kernel<128>
        <<<grid, kBlockThreads, 0, stream>>>(a, q, k_cache, v_cache, partials);
  } else {
    paged_attention_kernel<256>
        <<<grid, kBlockThreads, 0, stream>>>(a, q, k_cache, v_cache, partials);
  }
  MS_CUDA_CHECK(cudaGetLastError());
  const size_t elements = static_cast<size_t>(a.tokens * a.heads * a.hd);
  combine_splits_kernel<<<blocks_for(elements, kMaxElementwiseBlocks), kBlockThreads, 0, stream>>>(
      a, partials, out);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

PagedArgs args_of(const ops::PagedAttentionShape& s, const ops::PagedQuery* queries) {
  return PagedArgs{s.tokens,
                   s.heads,
                   s.kv_heads,
                   s.head_dim,
                   s.block_size,
                   s.window,
                   1.0f / std::sqrt(static_cast<float>(s.head_dim)),
                   queries};
}

}  // namespace

Status paged_kv_store(const ops::PagedAttentionShape& s, const ops::PagedQuery* queries,
                      const float* k, const float* v, float* k_cache, float* v_cache,
                      Stream stream) {
  constexpr const char* kOp = "kernels::paged_kv_store";
  MS_RETURN_IF_ERROR(check_shape(kOp, s));
  const size_t tokens = static_cast<size_t>(s.tokens);
  const size_t kv_count = tokens * static_cast<size_t>(s.kv_heads * s.head_dim);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "queries", queries, tokens));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "k", k, kv_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "v", v, kv_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "k_cache", k_cache, tokens > 0 ? 1 : 0));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "v_cache", v_cache, tokens > 0 ? 1 : 0));
  if (tokens == 0) return Status::OK();
  kv_store_kernel<<<blocks_for(kv_count, kMaxElementwiseBlocks), kBlockThreads, 0,
                    static_cast<cudaStream_t>(stream)>>>(args_of(s, queries), k, v, k_cache,
                                                         v_cache);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status paged_attention(const ops::PagedAttentionShape& s, const ops::PagedQuery* queries,
                       const float* q, const float* k_cache, const float* v_cache, float* out,
                       Stream stream) {
  constexpr const char* kOp = "kernels::paged_attention";
  MS_RETURN_IF_ERROR(check_shape(kOp, s));
  const size_t tokens = static_cast<size_t>(s.tokens);
  const size_t q_count = tokens * static_cast<size_t>(s.heads * s.head_dim);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "queries", queries, tokens));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "q", q, q_count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "k_cache", k_cache, tokens > 0 ? 1 : 0));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "v_cache", v_cache, tokens > 0 ? 1 : 0));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "out", out, q_count));
  MS_RETURN_IF_ERROR(
      check_disjoint(kOp, "out", out, q_count * sizeof(float), "q", q, q_count * sizeof(float)));
  if (tokens == 0) return Status::OK();
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  // Tokens go in passes of at most kTokensPerPass, which bounds the partials' workspace; a
  // token's result does not depend on the pass it is in.
  const size_t pass_tokens = std::min(tokens, kTokensPerPass);
  const size_t row = static_cast<size_t>(s.heads * s.head_dim);
  const size_t partial_count =
      pass_tokens * static_cast<size_t>(s.heads) * kSplits * static_cast<size_t>(s.head_dim + 2);
  void* workspace = nullptr;
  MS_CUDA_CHECK(cudaMallocAsync(&workspace, partial_count * sizeof(float), cuda_stream));
  Status launched = Status::OK();
  for (size_t first = 0; first < tokens && launched.ok(); first += pass_tokens) {
    ops::PagedAttentionShape pass = s;
    pass.tokens = static_cast<int64_t>(std::min(pass_tokens, tokens - first));
    launched = launch_splits(args_of(pass, queries + first), q + first * row, k_cache, v_cache,
                             static_cast<float*>(workspace), out + first * row, cuda_stream);
  }
  MS_CUDA_CHECK(cudaFreeAsync(workspace, cuda_stream));
  return launched;
}

}  // namespace ms::kernels
