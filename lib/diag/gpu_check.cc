// The GPU benchmarks of check; see gpu_check.h. CUDA code lives in kernels/ (linked into
// ms_diag when the build has CUDA); this file only chooses the device and names the metrics.
#include "diag/gpu_check.h"

#include "core/logging.h"
#include "diag/nvml.h"
#ifdef MS_HAVE_CUDA
#include "kernels/bandwidth_rate.h"
#include "kernels/device.h"
#include "kernels/sgemm_rate.h"
#endif

namespace ms::diag {

#ifdef MS_HAVE_CUDA
namespace {

// Where probes put what they found.
struct ProbeResults {
  std::map<std::string, double> metrics;
  std::vector<std::string>* faults = nullptr;
};

// One probe's value under `name`, or its failure as a fault naming the GPU and the error.
void probe(ProbeResults& out, const std::string& name, int device, const Result<double>& value) {
  if (value.ok()) {
    out.metrics[name] = *value;
    return;
  }
  const std::string fault = "GPU " + std::to_string(device) + ": " + name +
                            " failed: " + value.status().message();
  MS_LOG(Warn) << "check: " << fault;
  if (out.faults) out.faults->push_back(fault);
}

void gemm_probe(ProbeResults& out, const std::string& name, int device,
                kernels::GemmPrecision precision, const Result<double>& gflops) {
  probe(out, name + "_gflops", device, gflops);
  std::map<std::string, double>& metrics = out.metrics;
  Result<double> peak = kernels::device_peak_gflops(precision);
  if (gflops.ok() && peak.ok() && *peak > 0) metrics[name + "_peak_pct"] = 100 * *gflops / *peak;
}

}  // namespace

std::map<std::string, double> gpu_rank_metrics(int rank, const GpuProbeSizes& sizes, int reps,
                                               std::vector<std::string>* faults) {
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
    const std::string fault = "GPU " + std::to_string(device) +
                              " cannot be selected: " + selected.message();
    MS_LOG(Warn) << "check: " << fault;
    if (faults) faults->push_back(fault);
    return {};
  }
  ProbeResults out{{}, faults};
  if (sizes.sgemm_n > 0) {
    gemm_probe(out, "gpu_sgemm", device, kernels::GemmPrecision::kF32,
               kernels::measure_sgemm_gflops(sizes.sgemm_n, reps));
  }
  if (sizes.bf16_n > 0) {
    gemm_probe(out, "gpu_bf16_gemm", device, kernels::GemmPrecision::kBf16,
               kernels::measure_gemm_bf16_gflops(sizes.bf16_n, reps));
  }
  if (sizes.bytes > 0) {
    probe(out, "gpu_read_gbs", device, kernels::measure_device_read_gbs(sizes.bytes, reps));
    probe(out, "gpu_copy_gbs", device, kernels::measure_device_copy_gbs(sizes.bytes, reps));
    probe(out, "gpu_h2d_gbs", device, kernels::measure_host_to_device_gbs(sizes.bytes, reps));
    probe(out, "gpu_d2h_gbs", device, kernels::measure_device_to_host_gbs(sizes.bytes, reps));
  }
  return out.metrics;
}

std::vector<std::string> gpu_health_faults(int rank, const GpuThresholds& thresholds) {
  Result<int> count = kernels::device_count();
  if (!count.ok() || *count == 0) return {};
  const int device = rank % *count;
  Result<std::string> bus_id = kernels::device_pci_bus_id(device);
  Result<std::vector<GpuReading>> readings = read_all_gpus();
  if (!bus_id.ok() || !readings.ok()) {
    MS_LOG(Debug) << "check: no NVML health for GPU " << device << ": "
                  << (bus_id.ok() ? readings.status().message() : bus_id.status().message());
    return {};
  }
  const GpuReading* reading = find_reading_by_bus_id(*readings, *bus_id);
  if (reading == nullptr) {
    MS_LOG(Warn) << "check: NVML does not list GPU " << device << " at " << *bus_id;
    return {};
  }
  return gpu_fault_lines(judge_gpu(*reading, thresholds));
}
#else
std::map<std::string, double> gpu_rank_metrics(int, const GpuProbeSizes&, int,
                                               std::vector<std::string>*) {
  return {};
}
std::vector<std::string> gpu_health_faults(int, const GpuThresholds&) { return {}; }
#endif

}  // namespace ms::diag
