// Two kernels behind one entry point.
//
// The chunked kernel, for rows of W that are whole 16-byte chunks and a 16-byte aligned x (every
// int4 matrix, bf16 with cols % 8 == 0, int8 with cols % 16 == 0, f32 with cols % 4 == 0): a
// block computes a few rows (ChunkShape::rows) for one or a tile of tokens. Each thread takes
// every threads-th 16-byte chunk of those rows (4 f32, 8 bf16, 16 int8 or 32 int4 codes) with
// one vector load per row, loads `unroll` chunks ahead to keep bytes in flight, decodes them in
// registers, and reuses each chunk of x it loads for all the block's rows. An int4 chunk lies
// inside one scale group (groups are 32, 64 or 128 codes), so its scale multiplies the chunk's
// sum once.
//
// The element kernel handles every other shape: one warp per output, decoding one weight per
// lane and step. Both sum in fp32 and match the CPU twins within summation-order rounding.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/quant_gemm.cuh"
#include "kernels/quant_gemm_store.cuh"

namespace ms::kernels {

using ops::WeightFormat;

constexpr unsigned kWarp = 32;
constexpr unsigned kWarpsPerBlock = kBlockThreads / kWarp;
constexpr int64_t kChunkBytes = 16;

static __device__ float weight_at(const ops::QuantView& w, int64_t r, int64_t c) {
  switch (w.format) {
    case WeightFormat::kF32:
      return reinterpret_cast<const float*>(w.values)[r * w.cols + c];
    case WeightFormat::kBF16: {
      const unsigned short bits = reinterpret_cast<const unsigned short*>(w.values)[r * w.cols + c];
      return __uint_as_float(static_cast<unsigned>(bits) << 16);
    }
    case WeightFormat::kInt8:
      return static_cast<float>(static_cast<signed char>(w.values[r * w.cols + c])) * w.scales[r];
    case WeightFormat::kInt4: {
      const unsigned char byte = w.values[r * (w.cols / 2) + c / 2];
      const int code = static_cast<int>((c % 2 == 0) ? (byte & 0x0f) : (byte >> 4)) - 8;
      return static_cast<float>(code) * w.scales[r * (w.cols / w.group_size) + c / w.group_size];
    }
  }
  return 0.0f;
}

// Weights in one 16-byte chunk.
template <WeightFormat F>
constexpr int kWeightsPerChunk = F == WeightFormat::kF32    ? 4
                                 : F == WeightFormat::kBF16 ? 8
                                 : F == WeightFormat::kInt8 ? 16
                                                            : 32;

// Integer codes become floats without the int-to-float conversion, which runs at a quarter of
// the FMA rate and capped int4 decode at about a third of the bandwidth: a byte permute places
// an unsigned code u (0..255) in the low mantissa bits of 2^23 (bits 0x4B000000), giving the
// float 2^23 + u exactly, and one subtraction removes 2^23 and the code's offset (8 for int4,
// 128 for int8 after flipping its sign bit).
constexpr unsigned kTwoPow23Bits = 0x4B000000u;
static __device__ __forceinline__ float code_in_byte(unsigned bytes, unsigned k, float offset) {
  // Result bytes, low to high: byte k of `bytes`, then 0, 0, 0x4B from kTwoPow23Bits.
  return __uint_as_float(__byte_perm(bytes, kTwoPow23Bits, 0x7440u | k)) - offset;
}

// The chunk's 32-bit words as weights; int8 and int4 codes come out unscaled.
template <WeightFormat F>
static __device__ void decode_chunk(const uint4& chunk, float* out) {
  const unsigned words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned v = words[i];
    if constexpr (F == WeightFormat::kF32) {
      out[i] = __uint_as_float(v);
    } else if constexpr (F == WeightFormat::kBF16) {
      out[2 * i] = __uint_as_float(v << 16);
      out[2 * i + 1] = __uint_as_float(v & 0xffff0000u);
    } else if constexpr (F == WeightFormat::kInt8) {
      const unsigned biased = v ^ 0x80808080u;  // two's complement code c becomes c + 128
#pragma unroll
      for (unsigned b = 0; b < 4; ++b) out[4 * i + b] = code_in_byte(biased, b, 8388736.0f);
    } else {
      // Byte k holds codes 2k (low nibble) and 2k + 1 (high nibble), each stored as code + 8.
      const unsigned low = v & 0x0f0f0f0fu;
      const unsigned high = (v >> 4) & 0x0f0f0f0fu;
#pragma unroll
      for (unsigned b = 0; b < 4; ++b) {
        out[8 * i + 2 * b] = code_in_byte(low, b, 8388616.0f);
        out[8 * i + 2 * b + 1] = code_in_byte(high, b, 8388616.0f);
      }
    }
  }
}

// The chunked kernel's shape: kThreads threads per block, kRows rows per block, kUnroll chunks
// per thread loaded before any is decoded (bytes in flight), kTokens rows of x per block.
template <int kThreads, int kRows, int kUnroll, int kTokens>
struct ChunkShape {
  static constexpr int threads = kThreads, rows = kRows, unroll = kUnroll, tokens = kTokens;
};

// Decode at batch 1 is bound by instruction issue for int8 and int4 (a decode and an FMA per
// weight) and by bandwidth for f32 and bf16: the shapes are the fastest of a sweep over
// threads {32..256} x rows {1, 2, 4, 8} x unroll {1, 2, 4} on an H200 (docs/bench/kernels.md).
// More rows per block share each chunk of x among more weights; batches use one shape for all.
template <WeightFormat F>
using DecodeShape = ChunkShape<F == WeightFormat::kInt8 ? 64 : 128,
                               F == WeightFormat::kInt4 ? 8 : 4,
                               F == WeightFormat::kInt4 ? 1 : 2, 1>;
using BatchShape = ChunkShape<128, 4, 1, 4>;

template <WeightFormat F, typename Shape>
static __global__ void __launch_bounds__(Shape::threads)
    chunked_linear_kernel(const float* __restrict__ x, ops::QuantView w, float* __restrict__ y,
                          int64_t n) {
  constexpr int kPer = kWeightsPerChunk<F>;
  constexpr int kThreads = Shape::threads, kRows = Shape::rows, kUnroll = Shape::unroll,
                kTokens = Shape::tokens;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  const int64_t row_chunks = w.cols / kPer;
  const auto* chunks = reinterpret_cast<const uint4*>(w.values);
  // Rows past the end repeat the last row; their sums are never written.
  int64_t row[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) row[i] = min(r0 + i, w.rows - 1);
  const int64_t groups = F == WeightFormat::kInt4 ? w.cols / w.group_size : 0;
  // Chunks per int4 scale group are 1, 2 or 4: a chunk's group is a shift away.
  const int group_shift = F == WeightFormat::kInt4 ? __ffsll(w.group_size / kPer) - 1 : 0;

  float acc[kRows][kTokens] = {};
  for (int64_t j0 = threadIdx.x; j0 < row_chunks; j0 += int64_t{kThreads} * kUnroll) {
    uint4 wv[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = j0 + int64_t{u} * kThreads;
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        wv[u][i] = j < row_chunks ? __ldg(chunks + row[i] * row_chunks + j) : uint4{};
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = j0 + int64_t{u} * kThreads;
      if (j >= row_chunks) break;
      float scale[kRows];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        scale[i] = F == WeightFormat::kInt4 ? __ldg(w.scales + row[i] * groups + (j >> group_shift))
                                            : 1.0f;
      }
#pragma unroll
      for (int t = 0; t < kTokens; ++t) {
        if (t0 + t >= n) break;
        float xs[kPer];
        const auto* xv = reinterpret_cast<const float4*>(x + (t0 + t) * w.cols + j * kPer);
#pragma unroll
        for (int q = 0; q < kPer / 4; ++q) {
          const float4 v = __ldg(xv + q);
          xs[4 * q] = v.x;
          xs[4 * q + 1] = v.y;
          xs[4 * q + 2] = v.z;
          xs[4 * q + 3] = v.w;
        }
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          float wf[kPer];
          decode_chunk<F>(wv[u][i], wf);
          float part = 0.0f;
#pragma unroll
          for (int k = 0; k < kPer; ++k) part = fmaf(xs[k], wf[k], part);
          acc[i][t] = fmaf(scale[i], part, acc[i][t]);
        }
      }
    }
  }

  store_block_sums<kThreads, kRows, kTokens>(acc, w, r0, t0, n, F == WeightFormat::kInt8, y);
}

static __global__ void element_linear_kernel(const float* x, ops::QuantView w, float* y) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int64_t t = blockIdx.y;
  const unsigned lane = threadIdx.x % kWarp;
  if (r >= w.rows) return;
  const float* xt = x + t * w.cols;
  float acc = 0.0f;
  for (int64_t c = lane; c < w.cols; c += kWarp) acc = fmaf(xt[c], weight_at(w, r, c), acc);
  for (unsigned offset = kWarp / 2; offset > 0; offset /= 2) {
    acc += __shfl_down_sync(0xffffffffu, acc, offset);
  }
  if (lane == 0) y[t * w.rows + r] = acc;
}

// Whether the chunked kernel can read w and x with 16-byte loads.
static bool chunkable(const float* x, const ops::QuantView& w) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return ops::value_bytes(w.format, 1, w.cols) % kChunkBytes == 0 && w.cols % 4 == 0 &&
         aligned(x) && aligned(w.values);
}

template <WeightFormat F, typename Shape>
static void launch_shape(const float* x, const ops::QuantView& w, float* y, int64_t n,
                         cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((w.rows + Shape::rows - 1) / Shape::rows),
                  static_cast<unsigned>((n + Shape::tokens - 1) / Shape::tokens));
  chunked_linear_kernel<F, Shape><<<grid, Shape::threads, 0, stream>>>(x, w, y, n);
}

template <WeightFormat F>
static void launch_chunked(const float* x, const ops::QuantView& w, float* y, int64_t n,
                           cudaStream_t stream) {
  if (n == 1) {
    launch_shape<F, DecodeShape<F>>(x, w, y, n, stream);
  } else {
    launch_shape<F, BatchShape>(x, w, y, n, stream);
  }
}

Status check_quantized_linear_args(const float* x, const ops::QuantView& w, const float* y,
                                   int64_t n) {
  constexpr const char* kOp = "kernels::quantized_linear";
  MS_RETURN_IF_ERROR(ops::check_quantize_shape(w.format, w.rows, w.cols, w.group_size));
  if (n < 0) return InvalidArgument(std::string(kOp) + ": n is negative");
  const auto un = static_cast<size_t>(n);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "x", x, un * w.cols));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "y", y, un * w.rows));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "w.values", w.values,
                                  static_cast<size_t>(ops::value_bytes(w.format, w.rows, w.cols)),
                                  w.format == WeightFormat::kF32 ? 4 : 2));
  const int64_t scales = ops::scale_count(w.format, w.rows, w.cols, w.group_size);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "w.scales", w.scales, static_cast<size_t>(scales)));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "x", x, un * w.cols * sizeof(float), "y", y,
                                    un * w.rows * sizeof(float)));
  if (n > 65535) return InvalidArgument(std::string(kOp) + ": n above 65535 rows of x");
  return Status::OK();
}

Status quantized_linear(const float* x, const ops::QuantView& w, float* y, int64_t n,
                        Stream stream) {
  MS_RETURN_IF_ERROR(check_quantized_linear_args(x, w, y, n));
  if (n == 0) return Status::OK();
  const auto s = static_cast<cudaStream_t>(stream);
  if (!chunkable(x, w)) {
    const dim3 grid(static_cast<unsigned>((w.rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
                    static_cast<unsigned>(n));
    element_linear_kernel<<<grid, kBlockThreads, 0, s>>>(x, w, y);
  } else {
    switch (w.format) {
      case WeightFormat::kF32: launch_chunked<WeightFormat::kF32>(x, w, y, n, s); break;
      case WeightFormat::kBF16: launch_chunked<WeightFormat::kBF16>(x, w, y, n, s); break;
      case WeightFormat::kInt8: launch_chunked<WeightFormat::kInt8>(x, w, y, n, s); break;
      case WeightFormat::kInt4: launch_chunked<WeightFormat::kInt4>(x, w, y, n, s); break;
    }
  }
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

}  // namespace ms::kernels
