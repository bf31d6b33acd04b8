// kernels::quantized_linear with int8 activations (ops/quant_act.h), twin of the CPU integer
// kernels: one kernel quantizes x on the device into the codes and scales
// ops::quantize_activations makes (the same bits: the same divisions and ties-to-even
// rounding, with no fused multiply-add), and the chunked kernel multiplies 16-byte chunks of W
// by them with __dp4a, four signed byte products and their sum a 32-bit instruction. An int8
// chunk holds 16 codes of one 64-column activation chunk; an int4 chunk 32 columns, half of
// one: its nibbles, masked and re-centred per byte (__vsub4) to signed codes, meet the chunk's
// even-column codes (the low nibbles) and odd ones (the high), which the int4 layout keeps
// contiguous. Integer sums are exact; each chunk's is converted once and scaled into an fp32
// sum, so results match the CPU twins within fp32 summation-order rounding.
#include <cuda_runtime.h>

#include <cmath>

#include "core/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/quant_gemm.cuh"
#include "kernels/quant_gemm_store.cuh"

namespace ms::kernels {
namespace {

using ops::WeightFormat;

constexpr unsigned kWarp = 32;
constexpr int64_t kActChunk = ops::kActivationChunk;  // 64: two values per lane
constexpr float kCodeMax = 127.0f;

// One warp per scale's `subs` 64-value chunks (1, or 2 for int4 in groups of 128) of a row of
// x; lane l holds columns 2l and 2l + 1 of each.
__global__ void quantize_activations_kernel(const float* __restrict__ x, int64_t scales_total,
                                            int64_t subs, bool int4_layout,
                                            signed char* __restrict__ codes,
                                            float* __restrict__ scales) {
  constexpr int kMaxSubs = 2;
  const int64_t chunk =
      static_cast<int64_t>(blockIdx.x) * (kBlockThreads / kWarp) + threadIdx.x / kWarp;
  if (chunk >= scales_total) return;
  const unsigned lane = threadIdx.x % kWarp;
  // Rows are whole scale chunks, so the chunks are back to back.
  const int64_t base = chunk * subs * kActChunk;
  float v[kMaxSubs][2] = {};
  float amax = 0.0f;
  bool finite = true;
  for (int64_t s = 0; s < subs; ++s) {
    for (int k = 0; k < 2; ++k) {
      v[s][k] = x[base + s * kActChunk + 2 * lane + k];
      amax = fmaxf(amax, fabsf(v[s][k]));
      finite = finite && isfinite(v[s][k]);
    }
  }
  for (unsigned offset = kWarp / 2; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  finite = __all_sync(0xffffffffu, finite);
  const float inverse = (finite && amax > 0) ? __fdiv_rn(kCodeMax, amax) : 0.0f;
  if (lane == 0) scales[chunk] = finite ? __fdiv_rn(amax, kCodeMax) : nanf("");
  for (int64_t s = 0; s < subs; ++s) {
    for (int k = 0; k < 2; ++k) {
      const float q = fminf(kCodeMax, fmaxf(-kCodeMax, rintf(__fmul_rn(v[s][k], inverse))));
      // Column 2l + k of the chunk: int8 keeps column order, int4 puts even columns first.
      const unsigned at = int4_layout ? k * (kActChunk / 2) + lane : 2 * lane + k;
      codes[base + s * kActChunk + at] = inverse == 0.0f ? 0 : static_cast<signed char>(q);
    }
  }
}

// Each thread takes every kThreads-th 16-byte chunk of the block's kRows rows of W, for the
// block's kTokens rows of x, then the block's sums are reduced and written.
template <WeightFormat F, int kThreads, int kRows, int kTokens>
__global__ void __launch_bounds__(kThreads)
    int8_act_linear_kernel(const signed char* __restrict__ codes,
                           const float* __restrict__ act_scales, int64_t scale_cols,
                           ops::QuantView w, float* __restrict__ y, int64_t n) {
  constexpr int64_t kPer = F == WeightFormat::kInt8 ? 16 : 32;  // weights per 16-byte chunk
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  const int64_t row_chunks = w.cols / kPer;
  const int64_t act_scales_per_row = w.cols / scale_cols;
  const auto* chunks = reinterpret_cast<const uint4*>(w.values);
  int64_t row[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) row[i] = min(r0 + i, w.rows - 1);
  const int64_t groups = F == WeightFormat::kInt4 ? w.cols / w.group_size : 0;

  float acc[kRows][kTokens] = {};
  for (int64_t j = threadIdx.x; j < row_chunks; j += kThreads) {
    uint4 wv[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) wv[i] = __ldg(chunks + row[i] * row_chunks + j);
    const int64_t a = j * kPer / kActChunk;  // the activation chunk (of 64 codes)
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t0 + t >= n) break;
      const signed char* xt = codes + (t0 + t) * w.cols;
      const float xs =
          __ldg(act_scales + (t0 + t) * act_scales_per_row + j * kPer / scale_cols);
      if constexpr (F == WeightFormat::kInt8) {
        const uint4 xv = __ldg(reinterpret_cast<const uint4*>(xt + j * kPer));
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          int sum = __dp4a(static_cast<int>(wv[i].x), static_cast<int>(xv.x), 0);
          sum = __dp4a(static_cast<int>(wv[i].y), static_cast<int>(xv.y), sum);
          sum = __dp4a(static_cast<int>(wv[i].z), static_cast<int>(xv.z), sum);
          sum = __dp4a(static_cast<int>(wv[i].w), static_cast<int>(xv.w), sum);
          acc[i][t] = fmaf(static_cast<float>(sum), xs, acc[i][t]);
        }
      } else {
        // The chunk is half h of activation chunk a: its even columns' codes start at byte
        // 16h of the chunk's first half, its odd ones' at byte 16h of the second.
        const signed char* xa = xt + a * kActChunk + 16 * (j % 2);
        const uint4 xe = __ldg(reinterpret_cast<const uint4*>(xa));
        const uint4 xo = __ldg(reinterpret_cast<const uint4*>(xa + kActChunk / 2));
        const unsigned even[4] = {xe.x, xe.y, xe.z, xe.w}, odd[4] = {xo.x, xo.y, xo.z, xo.w};
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          const unsigned words[4] = {wv[i].x, wv[i].y, wv[i].z, wv[i].w};
          int sum = 0;
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const unsigned low = __vsub4(words[k] & 0x0f0f0f0fu, 0x08080808u);
            const unsigned high = __vsub4((words[k] >> 4) & 0x0f0f0f0fu, 0x08080808u);
            sum = __dp4a(static_cast<int>(low), static_cast<int>(even[k]), sum);
            sum = __dp4a(static_cast<int>(high), static_cast<int>(odd[k]), sum);
          }
          const float ws = __ldg(w.scales + row[i] * groups + j * kPer / w.group_size);
          acc[i][t] = fmaf(static_cast<float>(sum), ws * xs, acc[i][t]);
        }
      }
    }
  }

  store_block_sums<kThreads, kRows, kTokens>(acc, w, r0, t0, n, F == WeightFormat::kInt8, y);
}

template <WeightFormat F, int kThreads, int kRows, int kTokens>
void launch(const signed char* codes, const float* scales, int64_t scale_cols,
            const ops::QuantView& w, float* y, int64_t n, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((w.rows + kRows - 1) / kRows),
                  static_cast<unsigned>((n + kTokens - 1) / kTokens));
  int8_act_linear_kernel<F, kThreads, kRows, kTokens>
      <<<grid, kThreads, 0, stream>>>(codes, scales, scale_cols, w, y, n);
}

// Decode (n = 1) and batches, per format.
template <WeightFormat F>
void launch_format(const signed char* codes, const float* scales, int64_t scale_cols,
                   const ops::QuantView& w, float* y, int64_t n, cudaStream_t stream) {
  if (n == 1) {
    launch<F, 128, 4, 1>(codes, scales, scale_cols, w, y, n, stream);
  } else {
    launch<F, 128, 4, 4>(codes, scales, scale_cols, w, y, n, stream);
  }
}

}  // namespace

Status quantize_activations(const float* x, int64_t n, int64_t cols, ops::WeightFormat format,
                            int64_t scale_cols, signed char* codes, float* scales,
                            Stream stream) {
  constexpr const char* kOp = "kernels::quantize_activations";
  if (!ops::activation_scale_cols_valid(format, scale_cols)) {
    return InvalidArgument(std::string(kOp) + ": scale_cols " + std::to_string(scale_cols) +
                           " is not 64 (or 128 for int4 weights)");
  }
  if (n < 0 || cols < 0 || cols % scale_cols != 0) {
    return InvalidArgument(std::string(kOp) + ": cols " + std::to_string(cols) +
                           " is not a multiple of " + std::to_string(scale_cols) +
                           " (or n is negative)");
  }
  const auto values = static_cast<size_t>(n * cols);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "x", x, values));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "codes", static_cast<const void*>(codes), values, 16));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "scales", scales, values / scale_cols));
  const int64_t scales_total = n * cols / scale_cols;
  if (scales_total == 0) return Status::OK();
  constexpr int64_t kWarpsPerBlock = kBlockThreads / kWarp;
  const auto blocks = static_cast<unsigned>((scales_total + kWarpsPerBlock - 1) / kWarpsPerBlock);
  quantize_activations_kernel<<<blocks, kBlockThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, scales_total, scale_cols / kActChunk, format == WeightFormat::kInt4, codes, scales);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status quantized_linear(const float* x, const ops::QuantView& w, float* y, int64_t n,
                        ops::ActivationFormat activations, Stream stream) {
  // The kernel reads W in 16-byte loads: a matrix whose values are not 16-byte aligned takes
  // the f32-activation path, which has a kernel for it.
  const bool aligned = reinterpret_cast<uintptr_t>(w.values) % 16 == 0;
  if (activations == ops::ActivationFormat::kF32 || !ops::int8_activations_apply(w) || !aligned) {
    return quantized_linear(x, w, y, n, stream);
  }
  constexpr const char* kOp = "kernels::quantized_linear (int8 activations)";
  MS_RETURN_IF_ERROR(check_quantized_linear_args(x, w, y, n));
  if (n == 0) return Status::OK();
  const auto s = static_cast<cudaStream_t>(stream);
  const auto values = static_cast<size_t>(n * w.cols);
  void* workspace = nullptr;
  const int64_t scale_cols = ops::activation_scale_cols(w);
  // Codes first (16-byte aligned rows: cols is a multiple of 64), then the scales.
  MS_CUDA_CHECK(cudaMallocAsync(&workspace, values + values / scale_cols * sizeof(float), s));
  auto* codes = static_cast<signed char*>(workspace);
  auto* scales = reinterpret_cast<float*>(codes + values);
  Status status = quantize_activations(x, n, w.cols, w.format, scale_cols, codes, scales, stream);
  if (status.ok()) {
    if (w.format == WeightFormat::kInt8) {
      launch_format<WeightFormat::kInt8>(codes, scales, scale_cols, w, y, n, s);
    } else {
      launch_format<WeightFormat::kInt4>(codes, scales, scale_cols, w, y, n, s);
    }
    const cudaError_t launched = cudaGetLastError();
    if (launched != cudaSuccess) status = cuda_error(launched, kOp, __FILE__, __LINE__);
  }
  MS_CUDA_CHECK(cudaFreeAsync(workspace, s));
  return status;
}

}  // namespace ms::kernels
