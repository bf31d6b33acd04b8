// Paged decode attention and the cache store (see paged_attention.cuh). A query head's visible
// positions are split round robin over the block's 8 warps; a warp scores one position at a
// time (lanes over head_dim, a fixed shuffle tree) and keeps an online softmax, and the warps'
// partial results are merged in warp order, so every sum has a fixed order.
#include <cuda_runtime.h>

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

// One block per (token, query head).
template <int kMaxHd>
__global__ void __launch_bounds__(kBlockThreads)
    paged_attention_kernel(PagedArgs a, const float* q, const float* k_cache, const float* v_cache,
                           float* out) {
  constexpr int kPerLane = kMaxHd / kWarpSize;
  __shared__ float part_max[kWarps], part_sum[kWarps];
  __shared__ float part_acc[kWarps][kMaxHd];
  const int64_t token = blockIdx.x, h = blockIdx.y;
  const int64_t kvh = h / (a.heads / a.kv_heads);
  const ops::PagedQuery t = a.queries[token];
  const int64_t windowed = t.pos - a.window + 1;
  const int64_t first = a.window > 0 && windowed > t.first ? windowed : t.first;
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
  for (int64_t pos = first + warp; pos <= t.pos; pos += kWarps) {
    const int64_t at = cache_offset(a, t, pos, kvh);
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
  float* out_row = out + (token * a.heads + h) * a.hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += part_acc[w][d] * weight[w];
    out_row[d] = o / sum;
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
  const PagedArgs a = args_of(s, queries);
  const dim3 grid(static_cast<unsigned>(s.tokens), static_cast<unsigned>(s.heads));
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (s.head_dim <= 32) {
    paged_attention_kernel<32>
        <<<grid, kBlockThreads, 0, cuda_stream>>>(a, q, k_cache, v_cache, out);
  } else if (s.head_dim <= 64) {
    paged_attention_kernel<64>
        <<<grid, kBlockThreads, 0, cuda_stream>>>(a, q, k_cache, v_cache, out);
  } else if (s.head_dim <= 128) {
    paged_attention_kernel<128>
        <<<grid, kBlockThreads, 0, cuda_stream>>>(a, q, k_cache, v_cache, out);
  } else {
    paged_attention_kernel<256>
        <<<grid, kBlockThreads, 0, cuda_stream>>>(a, q, k_cache, v_cache, out);
  }
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

}  // namespace ms::kernels
