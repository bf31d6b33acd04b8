// The GPU twin of the sgemm-rate probe (lib/ops/sgemm_rate.h): cuBLASLt fp32 GFLOP/s on the
// current device. No CUDA types appear here, so CPU-only code (lib/diag) can include it.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace ms::kernels {

// Best GFLOP/s of an n x n x n sgemm (2 n^3 FLOPs) on the current device over `reps`
// repetitions (at least 1), after one untimed run that lets cuBLASLt pick its kernel.
// kUnavailable when there is no usable GPU; other device errors pass through.
Result<double> measure_sgemm_gflops(int64_t n, int reps);

}  // namespace ms::kernels
