// y = x W^T with W in a serving weight format (ops/quant.h), dequantization fused into the inner
// loop: a block of W is decoded in registers and used at once for up to four rows of x, so W is
// read once per block of rows and never expanded to f32 in memory. GEMV is the n = 1 case; for
// a long row of x it decodes four rows of W at a time, so x comes from L2 once for all four.
// int4 rows of a multiple of 8 vector widths (64 columns on AVX2, 128 on AVX-512) take 8 nibbles
// per 32-bit lane, decoded by table lookup (AVX-512) or by moving each to the top of its lane and
// converting (AVX2), and scale block sums per lane; other rows split a block into even and odd
// columns with each group's scale folded into the decode; x is laid out to match once per call.
//
// Three code paths compute the same thing: a scalar twin (the reference every other path is
// tested against), AVX2+FMA and AVX-512F, the widest the CPU supports being picked at run time
// (__builtin_cpu_supports). Work is split over output channels with ops::parallel_blocks; each
// output is computed by one task in a fixed order, so results do not depend on the thread count,
// and a row of x gives the same bits whether it comes alone (GEMV) or with others (GEMM).
// The CUDA twins in kernels/quant_gemm.cuh take the same arguments on device pointers.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "ops/quant.h"
#include "ops/quant_act.h"

namespace ms::ops {

enum class CpuPath : uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// "scalar", "avx2", "avx512".
std::string_view cpu_path_name(CpuPath path);
// Whether the path was compiled in and this CPU can run it (kScalar always).
bool cpu_path_supported(CpuPath path);
// The widest supported path; MS_QUANT_PATH=scalar|avx2|avx512 in the environment lowers it.
CpuPath best_cpu_path();

// x: (n, w.cols) f32, w: (w.rows, w.cols) quantized -> y: (n, w.rows) = x @ W^T, overwritten.
// n may be 0. y must not overlap x or w. The path must be supported (asserted).
void quantized_linear(const float* x, const QuantView& w, float* y, int64_t n, CpuPath path);
void quantized_linear(const float* x, const QuantView& w, float* y, int64_t n);

// The same with int8 activations when `activations` is kInt8 and int8_activations_apply(w):
// each row of x is quantized (ops/quant_act.h) and the integer kernels multiply (the scalar
// twin; AVX2 on the AVX2 path; on the AVX-512 path, vpdpbusd where the CPU has AVX512-VNNI, else
// AVX2); otherwise exactly the f32-activation call.
// Rows still give the same bits alone as in a batch, and results do not depend on the thread
// count.
void quantized_linear(const float* x, const QuantView& w, float* y, int64_t n, CpuPath path,
                      ActivationFormat activations);
void quantized_linear(const float* x, const QuantView& w, float* y, int64_t n,
                      ActivationFormat activations);

// Several weights that read the same x (q, k and v; gate and up): y_i = x @ W_i^T for each
// out, every y_i the same bits as quantized_linear(x, W_i, y_i, n, path, activations). When the
// weights share a format and cols, x is quantized (or laid out) once and one parallel region
// covers every weight's rows; otherwise each is computed in turn.
struct QuantLinearOut {
  QuantView w;
  float* y = nullptr;
};
void quantized_linears(const float* x, std::span<const QuantLinearOut> outs, int64_t n,
                       CpuPath path, ActivationFormat activations);
void quantized_linears(const float* x, std::span<const QuantLinearOut> outs, int64_t n,
                       ActivationFormat activations);

// x: (w.cols) -> y: (w.rows) = W x.
inline void quantized_gemv(const float* x, const QuantView& w, float* y) {
  quantized_linear(x, w, y, 1);
}

}  // namespace ms::ops
