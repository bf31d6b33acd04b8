// The scalar twin of the quantized linear: one float at a time, the reference the vector paths
// are tested against. Compiled for the baseline instruction set.
#include "ops/quant_gemm_impl.h"

namespace ms::ops {
namespace {

struct ScalarPath {
  using V = float;
  static constexpr bool kInt4Oct = false;  // the pair decode only (quant_gemm_impl.h)
  static constexpr int W = 1;
  static V zero() { return 0.0f; }
  static V load(const float* p) { return *p; }
  static V fmadd(V a, V b, V c) { return a * b + c; }
  static V add(V a, V b) { return a + b; }
  static float sum(V v) { return v; }
  static V bf16(const uint8_t* p) {
    uint32_t bits = 0;
    std::memcpy(&bits, p, 2);
    bits <<= 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  static V i8(const uint8_t* p) { return static_cast<float>(static_cast<int8_t>(*p)); }
  static V i4_scale(float s) { return s; }
  // One byte, columns c and c + 1 (low and high nibble, each as code + 8).
  static void i4(const uint8_t* bytes, V scale, V& even, V& odd) {
    even = static_cast<float>((*bytes & 0x0f) - 8) * scale;
    odd = static_cast<float>((*bytes >> 4) - 8) * scale;
  }
};

}  // namespace

void quant_rows_scalar(const float* x, const QuantView& w, float* y, int64_t n, int64_t row_begin,
                       int64_t row_end) {
  quant_rows<ScalarPath>(x, w, y, n, row_begin, row_end);
}

}  // namespace ms::ops
