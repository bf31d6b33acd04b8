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
// Empty when the binary has no CUDA or the rank sees no GPU; a probe that fails on a GPU is
// logged and left out, the others still run.
std::map<std::string, double> gpu_rank_metrics(int rank, const GpuProbeSizes& sizes, int reps);

}  // namespace ms::diag
