// The GPU twin of the sgemm-rate probe (lib/ops/sgemm_rate.h): cuBLASLt fp32 and bf16 GFLOP/s on
// the current device, and the device's dense peak to compare them with. No CUDA types appear
// here, so CPU-only code (lib/diag) can include it.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace ms::kernels {

// Best GFLOP/s of an n x n x n sgemm (2 n^3 FLOPs) on the current device over `reps`
// repetitions (at least 1), after one untimed run that lets cuBLASLt pick its kernel.
// kUnavailable when there is no usable GPU; other device errors pass through.
Result<double> measure_sgemm_gflops(int64_t n, int reps);
// The same for bf16 A and B with fp32 accumulation and output (kernels::gemm_bf16).
Result<double> measure_gemm_bf16_gflops(int64_t n, int reps);

enum class GemmPrecision { kF32, kBf16 };

// Dense FLOPs one streaming multiprocessor does per clock at `precision` (a fused multiply-add
// counts 2): fp32 on the CUDA cores (no TF32), bf16 on the tensor cores with fp32
// accumulation. From NVIDIA's architecture whitepapers: A100 (8.0) 128 and 2048 (19.5 and 312
// TFLOP/s over 108 SMs at 1410 MHz), H100/H200 (9.0) 256 and 4096 (4 tensor cores of 512 bf16
// FMA per clock). 0 for an architecture not in the table.
double peak_flops_per_sm_clock(int compute_major, int compute_minor, GemmPrecision precision);

// The current device's dense peak GFLOP/s at `precision`: SMs x the per-SM rate x the maximum
// SM clock (cudaDevAttrClockRate). Vendors quote peaks at a lower boost clock (989 TFLOP/s bf16
// for the H100 SXM at 1830 MHz), so this peak is the higher, stricter one. 0 when the
// architecture is not in the table; kUnavailable without a usable GPU.
Result<double> device_peak_gflops(GemmPrecision precision);

}  // namespace ms::kernels
