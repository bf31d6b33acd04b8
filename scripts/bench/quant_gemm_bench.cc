// The quantized linear (ops/quant_gemm.h) against the memory-bandwidth bound: for each weight
// format and every code path this CPU supports (or those --paths names), GEMV (n = 1, a decode
// step), reported as weight bytes read per second, as a fraction of the read bandwidth measured
// in the same run with the same threads (core/memory_bandwidth.h, measure_read_gbs; the
// one-thread STREAM copy figure beside it, labelled) and as a fraction of a plain read of the
// very same bytes (values and scales, split into the same 16 blocks per matrix on the same
// threads): what the kernel leaves of what its memory gives; and GEMM (n = --gemm-rows, a
// prefill) in GFLOP/s. --copies N multiplies N distinct copies of the matrix in turn, as a
// decode step multiplies its many matrices: with a last-level cache of hundreds of MiB (3D
// V-Cache parts report 512 MiB and more) one matrix stays in it between repetitions, so a
// memory-bound figure needs copies totalling several times that cache. int8 and int4 run
// twice, with f32 and with int8 activations (ops/quant_act.h; the GEMV time includes quantizing
// x). Threads: MS_NUM_THREADS (else OPENBLAS_NUM_THREADS, else all). Prints Markdown.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>
#include <random>
#include <vector>

#include "core/memory_bandwidth.h"
#include "core/timer.h"
#include "ops/parallel.h"
#include "ops/quant_gemm.h"

namespace {

using ms::ops::ActivationFormat;
using ms::ops::CpuPath;
using ms::ops::WeightFormat;

// Reads every copy's values and scales as the GEMV does: its rows in 16 blocks over the ops
// threads, a block's values and then its scales; the atomic sum keeps the loads.
uint64_t read_copies(const std::vector<ms::ops::QuantizedMatrix>& copies) {
  constexpr int64_t kBlocks = 16;
  std::atomic<uint64_t> sink{0};
  for (const ms::ops::QuantizedMatrix& q : copies) {
    const size_t row_bytes = q.values.size() / static_cast<size_t>(q.rows);
    const size_t row_scales = q.scales.size() / static_cast<size_t>(q.rows);
    ms::ops::parallel_blocks(kBlocks, 1, [&](int64_t b0, int64_t b1) {
      const size_t r0 = static_cast<size_t>(q.rows * b0 / kBlocks);
      const size_t r1 = static_cast<size_t>(q.rows * b1 / kBlocks);
      uint64_t sum = ms::read_bytes(q.values.data() + r0 * row_bytes, (r1 - r0) * row_bytes);
      sum += ms::read_bytes(q.scales.data() + r0 * row_scales,
                            (r1 - r0) * row_scales * sizeof(float));
      sink.fetch_add(sum, std::memory_order_relaxed);
    });
  }
  return sink.load();
}

// Best of `reps` timed calls, after one warm-up call.
double best_seconds(int reps, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const ms::Stopwatch clock;
    fn();
    best = std::min(best, clock.elapsed_s());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("GEMV/GEMM with quantized weights against the memory-bandwidth bound");
  int64_t rows = 4096, cols = 4096, gemm_rows = 64;
  int reps = 10;
  app.add_option("--rows", rows, "Output channels")->capture_default_str();
  app.add_option("--cols", cols, "Input channels (a multiple of 128)")->capture_default_str();
  app.add_option("--gemm-rows", gemm_rows, "Rows of x in the GEMM")->capture_default_str();
  app.add_option("--reps", reps, "Timed repetitions (the best is kept)")->capture_default_str();
  int64_t group = 64;
  app.add_option("--group-size", group, "int4 group size (32, 64 or 128)")->capture_default_str();
  int copies = 1;
  app.add_option("--copies", copies, "Distinct copies of the matrix the GEMV cycles through")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  std::string paths = "all";
  app.add_option("--paths", paths, "Code paths to run: all, or a comma list of scalar, avx2, "
                                   "avx512")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  // The paths --paths names, each checked against the library's own names for them.
  const CpuPath kPaths[] = {CpuPath::kScalar, CpuPath::kAvx2, CpuPath::kAvx512};
  std::vector<CpuPath> selected;
  if (paths == "all") {
    selected.assign(std::begin(kPaths), std::end(kPaths));
  } else {
    std::string rest = paths + ",";
    for (size_t at; (at = rest.find(',')) != std::string::npos; rest.erase(0, at + 1)) {
      const std::string name = rest.substr(0, at);
      const auto* hit = std::find_if(std::begin(kPaths), std::end(kPaths),
                                     [&](CpuPath p) { return ms::ops::cpu_path_name(p) == name; });
      if (hit == std::end(kPaths)) {
        std::fprintf(stderr, "--paths: '%s' is not one of scalar, avx2, avx512 (or all)\n",
                     name.c_str());
        return 2;
      }
      selected.push_back(*hit);
    }
  }

  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(gemm_rows * cols));
  for (float& v : w) v = dist(rng);
  for (float& v : x) v = dist(rng);
  std::vector<float> y(static_cast<size_t>(gemm_rows * rows));
  const size_t probe_bytes = std::max(size_t{256} << 20, 4 * ms::last_level_cache_bytes());
  const double read_gbs = ms::measure_read_gbs(probe_bytes, ms::ops::num_threads(), 5);
  const double copy_gbs = ms::measure_stream_gbs(ms::StreamKernel::kCopy, size_t{1} << 25, 5);
  std::printf("# %lld x %lld weights (int4 in groups of %lld), %d copies, %d threads; read %.2f "
              "GB/s (%d threads, %zu MiB); STREAM copy %.2f GB/s (1 thread, read + write "
              "counted)\n\n",
              static_cast<long long>(rows), static_cast<long long>(cols),
              static_cast<long long>(group), copies, ms::ops::num_threads(), read_gbs,
              ms::ops::num_threads(), probe_bytes >> 20, copy_gbs);
  std::printf(
      "| format | activations | path | weight MB | GEMV ms | GEMV GB/s | of read bw | same bytes "
      "read GB/s | of that | of copy bw | GEMM n=%lld GFLOP/s |\n",
      static_cast<long long>(gemm_rows));
  std::printf("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const std::pair<WeightFormat, int64_t> formats[] = {{WeightFormat::kF32, 0},
                                                      {WeightFormat::kBF16, 0},
                                                      {WeightFormat::kInt8, 0},
                                                      {WeightFormat::kInt4, group}};
  for (const auto& [format, format_group] : formats) {
    ms::Result<ms::ops::QuantizedMatrix> q =
        ms::ops::quantize_weights(w.data(), rows, cols, format, format_group ? format_group : 64);
    if (!q.ok()) {
      std::fprintf(stderr, "%s\n", q.status().message().c_str());
      return 1;
    }
    const ms::ops::QuantView view = q->view();
    const std::vector<ms::ops::QuantizedMatrix> all(static_cast<size_t>(copies), *q);
    const double mb = static_cast<double>(q->bytes()) * copies / 1e6;
    const double plain = best_seconds(reps, [&] { read_copies(all); });
    const double plain_gbs = mb / 1e3 / plain;
    for (ActivationFormat act : {ActivationFormat::kF32, ActivationFormat::kInt8}) {
      if (act == ActivationFormat::kInt8 && !ms::ops::int8_activations_apply(view)) continue;
      for (CpuPath path : kPaths) {
        if (!ms::ops::cpu_path_supported(path) ||
            std::find(selected.begin(), selected.end(), path) == selected.end()) {
          continue;
        }
        const std::string name(ms::ops::cpu_path_name(path));
        const double gemv = best_seconds(reps, [&] {
          for (const ms::ops::QuantizedMatrix& c : all) {
            ms::ops::quantized_linear(x.data(), c.view(), y.data(), 1, path, act);
          }
        });
        const double gemm = best_seconds(std::max(1, reps / 4), [&] {
          ms::ops::quantized_linear(x.data(), view, y.data(), gemm_rows, path, act);
        });
        const double gbs = mb / 1e3 / gemv;
        std::printf("| %s | %s | %s | %.1f | %.3f | %.2f | %.0f%% | %.2f | %.0f%% | %.0f%% | "
                    "%.1f |\n",
                    std::string(ms::ops::weight_format_name(format)).c_str(),
                    std::string(ms::ops::activation_format_name(act)).c_str(), name.c_str(), mb,
                    gemv * 1e3, gbs, 100.0 * gbs / read_gbs, plain_gbs,
                    100.0 * gbs / plain_gbs, 100.0 * gbs / copy_gbs,
                    2.0 * static_cast<double>(gemm_rows * rows * cols) / gemm / 1e9);
      }
    }
  }
  return 0;
}
