// Linear forward/backward as sgemm calls with the (out, in) weight layout; a forward of a few
// rows (a decode step) goes through the streaming GEMV of ops/quant_gemm.h instead.
#include "ops/linear.h"

#include "ops/gemm.h"
#include "ops/quant_gemm.h"

namespace ms::ops {

void linear_forward(const float* x, const float* w, float* y, int64_t n, int64_t in,
                    int64_t out) {
  if (n == 0) return;
  if (n <= kLinearGemvMaxRows) {
    const QuantView view{WeightFormat::kF32, out, in, 0, reinterpret_cast<const uint8_t*>(w),
                         nullptr};
    quantized_linear(x, view, y, n);
    return;
  }
  sgemm(Transpose::kNo, Transpose::kYes, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
}

void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     int64_t n, int64_t in, int64_t out) {
  if (n == 0) return;
  if (dx != nullptr) {
    sgemm(Transpose::kNo, Transpose::kNo, n, in, out, 1.0f, dy, out, w, in, 1.0f, dx, in);
  }
  if (dw != nullptr) {
    sgemm(Transpose::kYes, Transpose::kNo, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);
  }
}

void grouped_linear_forward(const float* x, const float* const* w, const int64_t* offsets,
                            int64_t groups, float* y, int64_t in, int64_t out) {
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r0 = offsets[g];
    linear_forward(x + r0 * in, w[g], y + r0 * out, offsets[g + 1] - r0, in, out);
  }
}

void grouped_linear_backward(const float* x, const float* const* w, const int64_t* offsets,
                             int64_t groups, const float* dy, float* dx, float* const* dw,
                             int64_t in, int64_t out) {
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r0 = offsets[g];
    linear_backward(x + r0 * in, w[g], dy + r0 * out, dx == nullptr ? nullptr : dx + r0 * in,
                    dw[g], offsets[g + 1] - r0, in, out);
  }
}

}  // namespace ms::ops
