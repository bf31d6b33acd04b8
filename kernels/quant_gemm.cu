// One warp per output y[t, r]: its lanes walk the row of W in strides of 32 columns, decode
// each weight (bf16 widening, int8 or int4 code times its scale), accumulate x * w, and the
// warp sums its lanes with shuffles. The int4 scale is applied per weight rather than per
// group, which changes only the rounding order.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/quant_gemm.cuh"

namespace ms::kernels {
namespace {

constexpr unsigned kWarp = 32;
constexpr unsigned kWarpsPerBlock = kBlockThreads / kWarp;

__device__ float weight_at(const ops::QuantView& w, int64_t r, int64_t c) {
  switch (w.format) {
    case ops::WeightFormat::kF32:
      return reinterpret_cast<const float*>(w.values)[r * w.cols + c];
    case ops::WeightFormat::kBF16: {
      const unsigned short bits = reinterpret_cast<const unsigned short*>(w.values)[r * w.cols + c];
      return __uint_as_float(static_cast<unsigned>(bits) << 16);
    }
    case ops::WeightFormat::kInt8:
      return static_cast<float>(static_cast<signed char>(w.values[r * w.cols + c])) * w.scales[r];
    case ops::WeightFormat::kInt4: {
      const unsigned char byte = w.values[r * (w.cols / 2) + c / 2];
      const int code = static_cast<int>((c % 2 == 0) ? (byte & 0x0f) : (byte >> 4)) - 8;
      return static_cast<float>(code) * w.scales[r * (w.cols / w.group_size) + c / w.group_size];
    }
  }
  return 0.0f;
}

}  // namespace

static __global__ void quantized_linear_kernel(const float* x, ops::QuantView w, float* y) {
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

Status quantized_linear(const float* x, const ops::QuantView& w, float* y, int64_t n,
                        Stream stream) {
  constexpr const char* kOp = "kernels::quantized_linear";
  MS_RETURN_IF_ERROR(ops::check_quantize_shape(w.format, w.rows, w.cols, w.group_size));
  if (n < 0) return InvalidArgument(std::string(kOp) + ": n is negative");
  const auto un = static_cast<size_t>(n);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "x", x, un * w.cols));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "y", y, un * w.rows));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "w.values", w.values,
                                  static_cast<size_t>(ops::value_bytes(w.format, w.rows, w.cols)),
                                  w.format == ops::WeightFormat::kF32 ? 4 : 2));
  const int64_t scales = ops::scale_count(w.format, w.rows, w.cols, w.group_size);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "w.scales", w.scales, static_cast<size_t>(scales)));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "x", x, un * w.cols * sizeof(float), "y", y,
                                    un * w.rows * sizeof(float)));
  if (n == 0) return Status::OK();
  if (n > 65535) return InvalidArgument(std::string(kOp) + ": n above 65535 rows of x");
  const dim3 grid(static_cast<unsigned>((w.rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>(n));
  quantized_linear_kernel<<<grid, kBlockThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, w, y);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

}  // namespace ms::kernels
