// The GPU part of `ms-diagnose check`'s per-rank benchmarks: the cuBLASLt sgemm rate of the
// GPU a rank uses. Built into lib/diag with or without CUDA; without it, or on a rank that sees
// no GPU, there is nothing to measure and the result is empty (a CPU-only node is not a
// suspect for lacking a GPU).
#pragma once

#include <map>
#include <string>

namespace ms::diag {

// {"gpu_sgemm_gflops": rate} for an n x n x n sgemm on GPU (rank mod device count), best of
// `reps`; empty when the binary has no CUDA, the rank sees no GPU, or the GPU fails (logged).
std::map<std::string, double> gpu_rank_metrics(int rank, int n, int reps);

}  // namespace ms::diag
