// The GPU benchmarks of check; see gpu_check.h. CUDA code lives in kernels/ (linked into
// ms_diag when the build has CUDA); this file only chooses the device and names the metrics.
#include "diag/gpu_check.h"

#include "core/logging.h"
#ifdef MS_HAVE_CUDA
#include "kernels/bandwidth_rate.h"
#include "kernels/device.h"
#include "kernels/sgemm_rate.h"
#endif

namespace ms::diag {

#ifdef MS_HAVE_CUDA
namespace {

// Runs one probe; its value under `name`, or a warning naming the GPU and the error.
void probe(std::map<std::string, double>& metrics, const std::string& name, int device,
           const Result<double>& value) {
  if (value.ok()) {
    metrics[name] = *value;
  } else {
    MS_LOG(Warn) << "check: GPU " << device << ": " << name
                 << " failed: " << value.status().message();
  }
}

void gemm_probe(std::map<std::string, double>& metrics, const std::string& name, int device,
                kernels::GemmPrecision precision, const Result<double>& gflops) {
  probe(metrics, name + "_gflops", device, gflops);
  Result<double> peak = kernels::device_peak_gflops(precision);
  if (gflops.ok() && peak.ok() && *peak > 0) metrics[name + "_peak_pct"] = 100 * *gflops / *peak;
}

}  // namespace

std::map<std::string, double> gpu_rank_metrics(int rank, const GpuProbeSizes& sizes, int reps) {
  Result<int> count = kernels::device_count();
  if (!count.ok() || *count == 0) {
    MS_LOG(Debug) << "check: no GPU probes: "
                  << (count.ok() ? "no device" : count.status().message());
    return {};
  }
  // The node-local rank is not known here; world rank modulo the device count spreads ranks
  // over the GPUs the same way on uniform nodes.
  const int device = rank % *count;
  if (Status selected = kernels::set_device(device); !selected.ok()) {
    MS_LOG(Warn) << "check: GPU " << device << " cannot be selected: " << selected.message();
    return {};
  }
  std::map<std::string, double> metrics;
  if (sizes.sgemm_n > 0) {
    gemm_probe(metrics, "gpu_sgemm", device, kernels::GemmPrecision::kF32,
               kernels::measure_sgemm_gflops(sizes.sgemm_n, reps));
  }
  if (sizes.bf16_n > 0) {
    gemm_probe(metrics, "gpu_bf16_gemm", device, kernels::GemmPrecision::kBf16,
               kernels::measure_gemm_bf16_gflops(sizes.bf16_n, reps));
  }
  if (sizes.bytes > 0) {
    probe(metrics, "gpu_read_gbs", device, kernels::measure_device_read_gbs(sizes.bytes, reps));
    probe(metrics, "gpu_copy_gbs", device, kernels::measure_device_copy_gbs(sizes.bytes, reps));
    probe(metrics, "gpu_h2d_gbs", device, kernels::measure_host_to_device_gbs(sizes.bytes, reps));
    probe(metrics, "gpu_d2h_gbs", device, kernels::measure_device_to_host_gbs(sizes.bytes, reps));
  }
  return metrics;
}
#else
std::map<std::string, double> gpu_rank_metrics(int, const GpuProbeSizes&, int) { return {}; }
#endif

}  // namespace ms::diag
