// The memory-bandwidth probes: after McCalpin's STREAM (copy, triad), a health metric of
// `ms-diagnose check` and the planner's profile; and a threaded read-only probe, the yardstick
// of work that only reads memory (ms-infer's decode bound: a step reads its weights, writes
// almost nothing, so copy bandwidth, half of it writes, is the wrong limit).
#pragma once

#include <cstddef>

namespace ms {

enum class StreamKernel {
  kCopy,   // a = b, as one memcpy; 2 x 8 bytes counted per element (read + write)
  kTriad,  // a = b + s * c; 3 x 8 bytes per element
};

// Best GB/s (1e9 bytes/s) of `kernel` over arrays of `elements` doubles, over `reps`
// repetitions (at least 1), counting bytes as STREAM does. The arrays are allocated and
// touched before the first timed repetition, so page faults are not measured, and are
// huge-page backed (core/huge_pages.h) as the serving weights it is the yardstick of.
double measure_stream_gbs(StreamKernel kernel, size_t elements, int reps);

// Best GB/s of reading `bytes` (rounded down to whole 64-byte lines), split into `threads`
// contiguous slices each read by its own thread at the same time, over `reps` passes (at least
// 1): every thread sums its slice with vector loads and several independent accumulators, so
// neither the adds nor the loads of one thread chain. The buffer is huge-page backed and
// touched before the first pass, like measure_stream_gbs's. 0 when fewer than one line per
// thread. For a bound on memory, pass bytes well above last_level_cache_bytes().
double measure_read_gbs(size_t bytes, int threads, int reps);

// The size of the largest CPU cache the OS reports (L3, else L2); 0 when it reports none.
size_t last_level_cache_bytes();

}  // namespace ms
