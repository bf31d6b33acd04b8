// Picks the code path and splits the output channels over the ops thread pool. The path files
// are compiled only where the compiler supports their instruction sets (MS_QUANT_AVX2 and
// MS_QUANT_AVX512, set by lib/ops/CMakeLists.txt on x86-64).
#include "ops/quant_gemm.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <vector>

#include "ops/parallel.h"
#include "ops/quant_gemm_impl.h"
#include "ops/quant_gemm_int8_act.h"

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

// The integer kernel a path uses, and whether it subtracts int4's nibble biases per weight
// group (Int8ActView::group_bias; the scalar twin subtracts them chunk by chunk). AVX-512F
// alone has no byte multiply-add, so the AVX-512 path takes the VNNI kernel where the CPU has
// AVX512-VNNI and AVX512BW, else AVX2's (every AVX-512 CPU has AVX2).
struct IntKernel {
  Int8ActRowsFn fn;
  bool group_bias;
  bool int4_steps = false;  // takes int4's x in int4_step_layout's
};

IntKernel int8_act_kernel(CpuPath path) {
#if defined(MS_QUANT_AVX512_VNNI)
  static const bool vnni =
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  if (path == CpuPath::kAvx512 && vnni) return {int8_act_rows_avx512, true, true};
#endif
#if defined(MS_QUANT_AVX2)
  if (path != CpuPath::kScalar && cpu_has(CpuPath::kAvx2)) return {int8_act_rows_avx2, true};
#endif
  (void)path;
  return {int8_act_rows_scalar, false};
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

// How a path's int4 kernel wants x laid out (quant_gemm_impl.h): blocks of lanes * per_lane
// columns, sub-vector k of a block holding columns k, k + per_lane, ... (one per lane).
struct Int4XLayout {
  int64_t lanes = 1, per_lane = 1;
};
Int4XLayout int4_x_layout(CpuPath path, int64_t cols) {
  switch (path) {
    case CpuPath::kAvx2: return cols % 64 == 0 ? Int4XLayout{8, 8}         // octs
                                               : Int4XLayout{8, 2};        // pairs
    case CpuPath::kAvx512: return cols % 128 == 0 ? Int4XLayout{16, 8}     // octs
                                                  : Int4XLayout{16, 2};    // pairs
    default: return {1, 2};  // the scalar twin: column order
  }
}

// x: (n, cols) in column order -> out in `layout`; cols is a multiple of its block.
void lay_out_int4_x(const float* x, int64_t n, int64_t cols, Int4XLayout layout, float* out) {
  const int64_t block = layout.lanes * layout.per_lane;
  for (int64_t t = 0; t < n; ++t) {
    const float* src = x + t * cols;
    float* dst = out + t * cols;
    for (int64_t b = 0; b < cols; b += block) {
      for (int64_t k = 0; k < layout.per_lane; ++k) {
        for (int64_t j = 0; j < layout.lanes; ++j) {
          dst[b + k * layout.lanes + j] = src[b + j * layout.per_lane + k];
        }
      }
    }
  }
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

namespace {

// Whether one copy of x, laid out or quantized once, serves every weight of `outs`.
bool share_input_layout(std::span<const QuantLinearOut> outs) {
  for (const QuantLinearOut& o : outs) {
    if (o.w.format != outs[0].w.format || o.w.cols != outs[0].w.cols ||
        o.w.group_size != outs[0].w.group_size ||
        activation_scale_cols(o.w) != activation_scale_cols(outs[0].w)) {
      return false;
    }
  }
  return true;
}

// The smallest block of work in weight bytes, so that claiming a block is small beside it.
constexpr int64_t kMinBlockBytes = 16384;

// A block of one weight's output channels.
struct RowBlock {
  size_t out;
  int64_t begin, end;
};

// Splits the output channels of `outs` (one format and width) into blocks, largest first: each
// takes 1 / (2 * threads) of the rows not yet handed out, at least kMinBlockBytes of weights, and
// ends at its weight's last row. Handed out in that order as threads come free, the large blocks
// go first and the last are small, so a thread that runs out of work waits at most for a small
// block. A decode step's products take 10-100 us each: with equal blocks, a thread waited for
// up to a whole block at the end of each (docs/bench/infer.md, "The int4 prefetch, blocks
// largest first").
void largest_first_blocks(std::span<const QuantLinearOut> outs, std::vector<RowBlock>* blocks) {
  const int64_t row_bytes = value_bytes(outs[0].w.format, 1, outs[0].w.cols);
  const int64_t min_rows = std::max<int64_t>(1, kMinBlockBytes / std::max<int64_t>(1, row_bytes));
  const int64_t share = 2 * static_cast<int64_t>(num_threads());
  int64_t left = 0;
  for (const QuantLinearOut& o : outs) left += o.w.rows;
  blocks->clear();
  for (size_t i = 0; i < outs.size(); ++i) {
    for (int64_t begin = 0; begin < outs[i].w.rows;) {
      const int64_t rows = std::max(min_rows, (left + share - 1) / share);
      const int64_t end = std::min(outs[i].w.rows, begin + rows);
      blocks->push_back({i, begin, end});
      left -= end - begin;
      begin = end;
    }
  }
}

// Calls fn(out, begin, end) over the blocks of largest_first_blocks, numbered across the
// weights and handed out by one parallel_blocks: several small matrices that read the same x
// cost one hand-off to the pool instead of one each.
template <class Fn>
void parallel_weight_blocks(std::span<const QuantLinearOut> outs, const Fn& fn) {
  // Reused: a decode step makes ~150 calls. Named through a reference, as a lambda that named
  // the thread_local would read the running thread's own copy.
  thread_local std::vector<RowBlock> reused;
  std::vector<RowBlock>& blocks = reused;
  largest_first_blocks(outs, &blocks);
  parallel_blocks(static_cast<int64_t>(blocks.size()), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const RowBlock& block = blocks[static_cast<size_t>(b)];
      fn(outs[block.out], block.begin, block.end);
    }
  });
}

}  // namespace

void quantized_linears(const float* x, std::span<const QuantLinearOut> outs, int64_t n,
                       CpuPath path, ActivationFormat activations) {
  assert(cpu_path_supported(path));
  if (n <= 0 || outs.empty()) return;
  if (!share_input_layout(outs)) {
    for (const QuantLinearOut& o : outs) quantized_linears(x, {&o, 1}, n, path, activations);
    return;
  }
  const QuantView& w = outs[0].w;
  for ([[maybe_unused]] const QuantLinearOut& o : outs) assert(o.w.rows >= 1 && o.w.cols >= 1);
  if (activations == ActivationFormat::kInt8 && int8_activations_apply(w)) {
    // Quantized once per call, read by every task; kept per thread so serving's calls reuse it.
    thread_local Int8Activations quantized;
    const int64_t scale_cols = activation_scale_cols(w);
    quantize_activations(x, n, w.cols, w.format, scale_cols, &quantized, path != CpuPath::kScalar);
    Int8ActView view{n, w.cols, scale_cols, quantized.codes.data(), quantized.scales.data(),
                     quantized.nibble_bias.data()};
    const IntKernel kernel = int8_act_kernel(path);
    if (kernel.group_bias && w.format == WeightFormat::kInt4) {
      thread_local std::vector<float> group_bias;
      int4_group_bias(quantized, w.group_size, &group_bias);
      view.group_bias = group_bias.data();
    }
    if (kernel.int4_steps && w.format == WeightFormat::kInt4) {
      thread_local std::vector<int8_t> step_codes;
      int4_step_layout(quantized, &step_codes);
      view.step_codes = step_codes.data();
    }
    parallel_weight_blocks(outs, [&](const QuantLinearOut& o, int64_t begin, int64_t end) {
      kernel.fn(view, o.w, o.y, begin, end);
    });
    return;
  }
  const QuantRowsFn fn = rows_fn(path);
  const Int4XLayout layout = int4_x_layout(path, w.cols);
  if (w.format == WeightFormat::kInt4 && layout.lanes > 1) {
    assert(w.cols % (layout.lanes * layout.per_lane) == 0);
    // One layout per call, read by every task; kept per thread so serving's calls reuse it.
    thread_local std::vector<float> laid_out;
    laid_out.resize(static_cast<size_t>(n * w.cols));
    lay_out_int4_x(x, n, w.cols, layout, laid_out.data());
    x = laid_out.data();
  }
  parallel_weight_blocks(outs, [&](const QuantLinearOut& o, int64_t begin, int64_t end) {
    fn(x, o.w, o.y, n, begin, end);
  });
}

void quantized_linears(const float* x, std::span<const QuantLinearOut> outs, int64_t n,
                       ActivationFormat activations) {
  quantized_linears(x, outs, n, best_cpu_path(), activations);
}

void quantized_linear(const float* x, const QuantView& w, float* y, int64_t n, CpuPath path) {
  quantized_linear(x, w, y, n, path, ActivationFormat::kF32);
}

void quantized_linear(const float* x, const QuantView& w, float* y, int64_t n) {
  quantized_linear(x, w, y, n, best_cpu_path());
}

void quantized_linear(const float* x, const QuantView& w, float* y, int64_t n, CpuPath path,
                      ActivationFormat activations) {
  const QuantLinearOut out{w, y};
  quantized_linears(x, {&out, 1}, n, path, activations);
}

void quantized_linear(const float* x, const QuantView& w, float* y, int64_t n,
                      ActivationFormat activations) {
  quantized_linear(x, w, y, n, best_cpu_path(), activations);
}

}  // namespace ms::ops
