// The CUDA kernels (kernels/) against the GPU's own limits, measured in the same run:
//  - the device-to-device copy bandwidth, bytes read plus bytes written (the ceiling for a
//    stream of weight bytes);
//  - kernels::quantized_linear at batch 1 (a decode step) for every weight format on the layer
//    shapes of an 8B model (int8 and int4 with f32 activations and with int8 ones, the time to
//    quantize x included), as bytes read per second (weights, scales, x and y) and as a
//    fraction of that copy bandwidth. Like decode moving through the layers, calls rotate over
//    copies of the matrix whose total exceeds --set-mib, so the L2 cache cannot serve them;
//  - the same at batch --batch, in GFLOP/s;
//  - cuBLASLt's fp32 (no TF32) and bf16 GEMM rates through kernels::sgemm and gemm_bf16.
// Times are wall-clock over --reps back-to-back calls on the default stream, after a warm-up
// pass, so launch overhead counts as it would in a decode loop without CUDA graphs. Prints
// Markdown; scripts/bench/kernel_bench_torch.py measures PyTorch on the same shapes.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/timer.h"
#include "kernels/device.h"
#include "kernels/gemm.cuh"
#include "kernels/quant_gemm.cuh"
#include "ops/quant.h"
#include "ops/quant_act.h"

namespace {

using ms::Status;
using ms::kernels::DeviceBuffer;
using ms::ops::WeightFormat;

void die_on(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "kernel_bench: %s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

template <typename T>
T value_or_die(ms::Result<T> r, const char* what) {
  die_on(r.status(), what);
  return std::move(r).value();
}

DeviceBuffer upload(const void* data, size_t bytes) {
  DeviceBuffer b = value_or_die(DeviceBuffer::allocate(bytes), "device allocation");
  die_on(ms::kernels::copy_to_device(b.data(), data, bytes), "copy to device");
  return b;
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Mean seconds per call of `fn(i)` over `reps` calls (i = 0..reps-1), after `warm` warm-up calls.
template <typename Fn>
double seconds_per_call(int warm, int reps, Fn&& fn) {
  for (int i = 0; i < warm; ++i) die_on(fn(i), "warm-up call");
  die_on(ms::kernels::synchronize(nullptr), "synchronize");
  const ms::Stopwatch clock;
  for (int i = 0; i < reps; ++i) die_on(fn(i), "timed call");
  die_on(ms::kernels::synchronize(nullptr), "synchronize");
  return clock.elapsed_s() / reps;
}

double copy_bandwidth_gbs(size_t bytes, int reps) {
  const DeviceBuffer src = value_or_die(DeviceBuffer::allocate(bytes), "copy source");
  const DeviceBuffer dst = value_or_die(DeviceBuffer::allocate(bytes), "copy destination");
  const double s = seconds_per_call(2, reps, [&](int) {
    return ms::kernels::copy_on_device(dst.data(), src.data(), bytes);
  });
  return 2.0 * static_cast<double>(bytes) / s / 1e9;
}

struct Shape {
  const char* name;
  int64_t rows, cols;
};

const char* format_name(WeightFormat f, int64_t group) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kInt8: return "int8";
    case WeightFormat::kInt4:
      return group == 32 ? "int4 g32" : group == 64 ? "int4 g64" : "int4 g128";
  }
  return "?";
}

struct QuantRow {
  double gemv_us, gemv_gbs, batch_gflops;
};

QuantRow measure_quantized(const Shape& shape, const std::vector<float>& w, WeightFormat format,
                           int64_t group, ms::ops::ActivationFormat activations, int64_t batch,
                           size_t set_bytes, int reps) {
  const ms::ops::QuantizedMatrix q = value_or_die(
      ms::ops::quantize_weights(w.data(), shape.rows, shape.cols, format, group), "quantize");
  const size_t value_bytes = q.values.size();
  const size_t scale_bytes = q.scales.size() * sizeof(float);
  const size_t copies = std::max<size_t>(1, set_bytes / (value_bytes + scale_bytes));
  std::vector<DeviceBuffer> values, scales;
  std::vector<ms::ops::QuantView> views;
  for (size_t i = 0; i < copies; ++i) {
    values.push_back(upload(q.values.data(), value_bytes));
    scales.push_back(scale_bytes ? upload(q.scales.data(), scale_bytes) : DeviceBuffer());
    ms::ops::QuantView v = q.view();
    v.values = values.back().as<uint8_t>();
    v.scales = scales.back().as<float>();
    views.push_back(v);
  }
  const std::vector<float> x = random_floats(static_cast<size_t>(batch * shape.cols), 11);
  const DeviceBuffer dx = upload(x.data(), x.size() * sizeof(float));
  const DeviceBuffer dy = value_or_die(
      DeviceBuffer::allocate(static_cast<size_t>(batch * shape.rows) * sizeof(float)), "y");
  const auto call = [&](int64_t n) {
    return [&, n](int i) {
      return ms::kernels::quantized_linear(dx.as<float>(), views[static_cast<size_t>(i) % copies],
                                           dy.as<float>(), n, activations);
    };
  };
  const int warm = static_cast<int>(copies);
  const double gemv_s = seconds_per_call(warm, reps, call(1));
  const double batch_s = seconds_per_call(warm, std::max(reps / 4, 1), call(batch));
  const double gemv_bytes = static_cast<double>(value_bytes + scale_bytes) +
                            4.0 * static_cast<double>(shape.cols + shape.rows);
  const double flops = 2.0 * static_cast<double>(batch * shape.rows * shape.cols);
  return {gemv_s * 1e6, gemv_bytes / gemv_s / 1e9, flops / batch_s / 1e9};
}

// cuBLASLt n x n x n products on constant inputs (exact, no denormals), in TFLOP/s.
double gemm_tflops(bool bf16, int64_t n, int reps) {
  const size_t count = static_cast<size_t>(n * n);
  const DeviceBuffer c = value_or_die(DeviceBuffer::allocate(count * sizeof(float)), "C");
  double s = 0;
  if (bf16) {
    const std::vector<ms::bf16> ones(count, ms::bf16{ms::float_to_bf16(1.0f)});
    const DeviceBuffer a = upload(ones.data(), count * sizeof(ms::bf16));
    s = seconds_per_call(2, reps, [&](int) {
      return ms::kernels::gemm_bf16(ms::ops::Transpose::kNo, ms::ops::Transpose::kNo, n, n, n, 1.0f,
                                    a.as<ms::bf16>(), n, a.as<ms::bf16>(), n, 0.0f, c.as<float>(),
                                    n);
    });
  } else {
    const std::vector<float> ones(count, 1.0f);
    const DeviceBuffer a = upload(ones.data(), count * sizeof(float));
    s = seconds_per_call(2, reps, [&](int) {
      return ms::kernels::sgemm(ms::ops::Transpose::kNo, ms::ops::Transpose::kNo, n, n, n, 1.0f,
                                a.as<float>(), n, a.as<float>(), n, 0.0f, c.as<float>(), n);
    });
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / s / 1e12;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("The CUDA kernels against the GPU's copy bandwidth and cuBLASLt");
  int reps = 200, gemm_n = 8192;
  int64_t batch = 16, set_mib = 1024;
  app.add_option("--reps", reps, "Timed calls per GEMV measurement")->capture_default_str();
  app.add_option("--batch", batch, "Rows of x in the batched measurement")->capture_default_str();
  app.add_option("--set-mib", set_mib, "Weight bytes the calls rotate over (beyond the L2)")
      ->capture_default_str();
  app.add_option("--gemm-n", gemm_n, "Size of the square GEMMs")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const int devices = value_or_die(ms::kernels::device_count(), "no CUDA device");
  std::printf("# %s (%d visible)\n\n",
              value_or_die(ms::kernels::device_name(0), "device name").c_str(), devices);
  const double copy_gbs = copy_bandwidth_gbs(size_t{1} << 30, 20);
  std::printf("device-to-device copy of 1 GiB: %.0f GB/s (read + written)\n\n", copy_gbs);

  const Shape shapes[] = {{"attn q/o 4096x4096", 4096, 4096},
                          {"mlp up 14336x4096", 14336, 4096},
                          {"mlp down 4096x14336", 4096, 14336},
                          {"lm head 32000x4096", 32000, 4096}};
  const std::pair<WeightFormat, int64_t> formats[] = {
      {WeightFormat::kF32, 0},   {WeightFormat::kBF16, 0},  {WeightFormat::kInt8, 0},
      {WeightFormat::kInt4, 32}, {WeightFormat::kInt4, 64}, {WeightFormat::kInt4, 128}};
  std::printf(
      "| shape | format | activations | GEMV us | GEMV GB/s | of copy bw | n=%lld GFLOP/s |\n",
      static_cast<long long>(batch));
  std::printf("|---|---|---|---:|---:|---:|---:|\n");
  using ms::ops::ActivationFormat;
  for (const Shape& shape : shapes) {
    const std::vector<float> w = random_floats(static_cast<size_t>(shape.rows * shape.cols), 7);
    for (const auto& [format, group] : formats) {
      for (ActivationFormat act : {ActivationFormat::kF32, ActivationFormat::kInt8}) {
        const bool integer = format == WeightFormat::kInt8 || format == WeightFormat::kInt4;
        if (act == ActivationFormat::kInt8 && !integer) continue;
        const QuantRow row = measure_quantized(shape, w, format, group, act, batch,
                                               static_cast<size_t>(set_mib) << 20, reps);
        std::printf("| %s | %s | %s | %.1f | %.0f | %.1f%% | %.0f |\n", shape.name,
                    format_name(format, group),
                    std::string(ms::ops::activation_format_name(act)).c_str(), row.gemv_us,
                    row.gemv_gbs, 100.0 * row.gemv_gbs / copy_gbs, row.batch_gflops);
        std::fflush(stdout);
      }
    }
  }
  std::printf("\ncuBLASLt %dx%dx%d: fp32 (no TF32) %.1f TFLOP/s, bf16 in fp32 out %.1f TFLOP/s\n",
              gemm_n, gemm_n, gemm_n, gemm_tflops(false, gemm_n, 10),
              gemm_tflops(true, gemm_n, 20));
  return 0;
}
