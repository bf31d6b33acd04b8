// The scalar twin of the integer kernels: per chunk of 64 columns (per half chunk for int4, whose
// groups of 32 may change scale there), the exact integer sum of the weights' codes times the
// activations' codes, then one rounding into the f32 total with the product of the scales (the
// activations' scale of that chunk's x.scale_cols columns).
#include "ops/quant_gemm_int8_act.h"

namespace ms::ops {
namespace {

float int8_dot(const Int8ActView& x, const QuantView& w, int64_t t, int64_t r) {
  const int64_t chunks = w.cols / kActivationChunk;
  const auto* wr = reinterpret_cast<const int8_t*>(w.values) + r * w.cols;
  const int8_t* xr = x.codes + t * w.cols;
  float acc = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    int32_t sum = 0;
    for (int64_t k = c * kActivationChunk; k < (c + 1) * kActivationChunk; ++k) {
      sum += int32_t{wr[k]} * int32_t{xr[k]};
    }
    acc += static_cast<float>(sum) * x.scales[t * chunks + c];
  }
  return acc * w.scales[r];
}

float int4_dot(const Int8ActView& x, const QuantView& w, int64_t t, int64_t r) {
  constexpr int64_t kHalf = kActivationChunk / 2;
  const uint8_t* wr = w.values + r * (w.cols / 2);
  const float* sr = w.scales + r * (w.cols / w.group_size);
  float acc = 0;
  const int8_t* xr = x.codes + t * w.cols;
  const float* xs = x.scales + t * (w.cols / x.scale_cols);
  for (int64_t h = 0; h < w.cols; h += kHalf) {
    int32_t sum = 0;
    for (int64_t col = h; col < h + kHalf; ++col) {
      sum += int4_code(wr, col) * xr[Int8Activations::code_index(WeightFormat::kInt4, col)];
    }
    acc += static_cast<float>(sum) * (sr[h / w.group_size] * xs[h / x.scale_cols]);
  }
  return acc;
}

}  // namespace

void int8_act_rows_scalar(const Int8ActView& x, const QuantView& w, float* y, int64_t row_begin,
                          int64_t row_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t t = 0; t < x.n; ++t) {
      y[t * w.rows + r] =
          w.format == WeightFormat::kInt4 ? int4_dot(x, w, t, r) : int8_dot(x, w, t, r);
    }
  }
}

}  // namespace ms::ops
