// The thread pool the CPU operators share, and a parallel_for over it. Operators split their
// work so that every output element is computed by exactly one task in a fixed order, so their
// results never depend on the number of threads or on timing (bitwise determinism).
//
// The pool size comes from MS_NUM_THREADS, else OPENBLAS_NUM_THREADS (tests and multi-rank runs
// set it to 1), else the hardware thread count. The pool and OpenBLAS never run at the same
// time: operators call sgemm outside parallel_for.
#pragma once

#include <cstdint>
#include <functional>

namespace ms::ops {

// Threads the operators use (the pool's workers plus the calling thread take part).
int num_threads();

// Calls fn(begin, end) over disjoint chunks covering [0, n) of at least min_chunk indices,
// in parallel, and returns when all are done. Runs inline when one thread or one chunk.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                  int64_t min_chunk = 1);

// Calls fn(begin, end) over blocks of `block` indices covering [0, n) (the last shorter), handed
// out one at a time as threads come free; runs inline when one thread or one block. For work
// short enough that a thread waking late or delayed by the hypervisor would leave the others
// waiting on its fixed share (a decode step's matrix products).
void parallel_blocks(int64_t n, int64_t block, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace ms::ops
