// The yardstick for model FLOPs utilization: how fast this rank multiplies fp32 matrices
// through OpenBLAS (the library every matmul of the model goes through), measured once at
// start-up with the thread count the rank will train with.
#pragma once

#include <cstdint>

namespace ms::train {

// Best GFLOP/s of an n x n x n sgemm (2 n^3 FLOPs) over repetitions lasting about
// `min_seconds` (at least three). Runs on the calling thread; uses OpenBLAS's threads.
double measure_sgemm_gflops(int64_t n = 512, double min_seconds = 0.3);

}  // namespace ms::train
