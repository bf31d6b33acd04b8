// The GPU part of `ms-diagnose check`'s per-rank benchmarks, on the GPU a rank uses: cuBLASLt
// fp32 and bf16 GEMM rates with their share of the device's dense peak
// (kernels/sgemm_rate.h), device memory read and copy bandwidth, and host-to-device and
// device-to-host bandwidth from pinned memory (kernels/bandwidth_rate.h). Built into lib/diag
// with or without CUDA; without it, or on a rank that sees no GPU, there is nothing to measure
// and the result is empty (a CPU-only node is not a suspect for lacking a GPU).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "diag/gpu_health.h"

namespace ms::diag {

// Sizes of the GPU probes; 0 skips a probe.
struct GpuProbeSizes {
  int sgemm_n = 2048;          // fp32 GEMM n x n x n
  int bf16_n = 8192;           // bf16 GEMM n x n x n (large enough to approach the peak)
  size_t bytes = 256u << 20;   // buffer of the read, copy and host transfer probes
};

// Metric -> value on GPU (rank mod device count), each the best of `reps`:
//   gpu_sgemm_gflops, gpu_sgemm_peak_pct, gpu_bf16_gemm_gflops, gpu_bf16_gemm_peak_pct
//   (the *_peak_pct only where the architecture's peak is known), gpu_read_gbs, gpu_copy_gbs
//   (read + write bytes), gpu_h2d_gbs, gpu_d2h_gbs.
// Empty when the binary has no CUDA or the rank sees no GPU. A probe that fails on a GPU (a
// GPU lost mid-check: cudaErrorDeviceUnavailable, an Xid) is left out, the others still run,
// and the failure is appended to `faults` ("GPU 3: gpu_bf16_gemm_gflops failed: ...").
std::map<std::string, double> gpu_rank_metrics(int rank, const GpuProbeSizes& sizes, int reps,
                                               std::vector<std::string>* faults = nullptr);

// The NVML health (gpu_health.h) of the GPU this rank uses, found among NVML's by its PCI
// address: one line per suspect or bad finding (gpu_fault_lines). Empty without CUDA, without
// a GPU, or without NVML (nothing can be judged there, which is no fault).
std::vector<std::string> gpu_health_faults(int rank, const GpuThresholds& thresholds = {});

}  // namespace ms::diag
