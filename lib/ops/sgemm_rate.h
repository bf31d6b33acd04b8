// The sgemm-rate probe: how fast this thread multiplies fp32 matrices through OpenBLAS, the
// library every matmul of the model goes through. It is the yardstick of model FLOPs
// utilization (ms-train) and a health metric of `ms-diagnose check`; both call this one
// function. The GPU twin is kernels::measure_sgemm_gflops (kernels/sgemm_rate.h).
#pragma once

#include <cstdint>

namespace ms::ops {

// Best GFLOP/s of an n x n x n sgemm (2 n^3 FLOPs) over at least `min_reps` repetitions and
// until `min_seconds` have passed. Inputs hold small non-zero values (no denormals, no zeros a
// library could skip). Runs on the calling thread with OpenBLAS's own threads.
double measure_sgemm_gflops(int64_t n, int min_reps, double min_seconds = 0);

}  // namespace ms::ops
