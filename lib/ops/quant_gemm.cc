// Picks the code path and splits the output channels over the ops thread pool. The path files
// are compiled only where the compiler supports their instruction sets (MS_QUANT_AVX2 and
// MS_QUANT_AVX512, set by lib/ops/CMakeLists.txt on x86-64).
#include "ops/quant_gemm.h"

#include <cassert>
#include <cstdlib>
#include <vector>

#include "ops/parallel.h"
#include "ops/quant_gemm_impl.h"

namespace ms::ops {
namespace {

bool cpu_has(CpuPath path) {
  switch (path) {
    case CpuPath::kScalar: return true;
    case CpuPath::kAvx2:
#if defined(MS_QUANT_AVX2)
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
      return false;
#endif
    case CpuPath::kAvx512:
#if defined(MS_QUANT_AVX512)
      return __builtin_cpu_supports("avx512f");
#else
      return false;
#endif
  }
  return false;
}

QuantRowsFn rows_fn(CpuPath path) {
  switch (path) {
#if defined(MS_QUANT_AVX2)
    case CpuPath::kAvx2: return quant_rows_avx2;
#endif
#if defined(MS_QUANT_AVX512)
    case CpuPath::kAvx512: return quant_rows_avx512;
#endif
    default: return quant_rows_scalar;
  }
}

// The widest path the CPU runs, no wider than MS_QUANT_PATH when that names one.
CpuPath pick_path() {
  CpuPath limit = CpuPath::kAvx512;
  if (const char* env = std::getenv("MS_QUANT_PATH")) {
    for (CpuPath p : {CpuPath::kScalar, CpuPath::kAvx2, CpuPath::kAvx512}) {
      if (cpu_path_name(p) == env) limit = p;
    }
  }
  for (CpuPath p : {CpuPath::kAvx512, CpuPath::kAvx2}) {
    if (p <= limit && cpu_path_supported(p)) return p;
  }
  return CpuPath::kScalar;
}

// The vector width a path's int4 kernel lays x out for (quant_gemm_impl.h).
int64_t int4_pair_width(CpuPath path) {
  switch (path) {
    case CpuPath::kAvx2: return 8;
    case CpuPath::kAvx512: return 16;
    default: return 1;
  }
}

// x: (n, cols) in column order -> out in blocks of 2 * width columns, each block's even columns
// and then its odd ones. cols is a multiple of 2 * width (int4 groups are multiples of 32).
void deinterleave_pairs(const float* x, int64_t n, int64_t cols, int64_t width, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* src = x + t * cols;
    float* dst = out + t * cols;
    for (int64_t b = 0; b < cols; b += 2 * width) {
      for (int64_t i = 0; i < width; ++i) {
        dst[b + i] = src[b + 2 * i];
        dst[b + width + i] = src[b + 2 * i + 1];
      }
    }
  }
}

// Output channels a task takes at least: enough weight bytes that the pool's hand-off is small
// beside the work.
int64_t min_rows_per_task(const QuantView& w) {
  const int64_t row_bytes = value_bytes(w.format, 1, w.cols) + 1;
  return row_bytes >= 16384 ? 1 : 16384 / row_bytes;
}

}  // namespace

std::string_view cpu_path_name(CpuPath path) {
  switch (path) {
    case CpuPath::kScalar: return "scalar";
    case CpuPath::kAvx2: return "avx2";
    case CpuPath::kAvx512: return "avx512";
  }
  return "unknown";
}

bool cpu_path_supported(CpuPath path) { return cpu_has(path); }

CpuPath best_cpu_path() {
  static const CpuPath path = pick_path();
  return path;
}

void quantized_linear(const float* x, const QuantView& w, float* y, int64_t n, CpuPath path) {
  assert(cpu_path_supported(path));
  assert(w.rows >= 1 && w.cols >= 1);
  if (n <= 0) return;
  const QuantRowsFn fn = rows_fn(path);
  const int64_t width = int4_pair_width(path);
  if (w.format == WeightFormat::kInt4 && width > 1) {
    assert(w.cols % (2 * width) == 0);
    // One layout per call, read by every task; kept per thread so serving's calls reuse it.
    thread_local std::vector<float> pairs;
    pairs.resize(static_cast<size_t>(n * w.cols));
    deinterleave_pairs(x, n, w.cols, width, pairs.data());
    x = pairs.data();
  }
  parallel_for(
      w.rows, [&](int64_t begin, int64_t end) { fn(x, w, y, n, begin, end); },
      min_rows_per_task(w));
}

void quantized_linear(const float* x, const QuantView& w, float* y, int64_t n) {
  quantized_linear(x, w, y, n, best_cpu_path());
}

}  // namespace ms::ops
