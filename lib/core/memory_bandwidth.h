// The memory-bandwidth probe, after McCalpin's STREAM: the yardstick of memory-bound work
// (ms-infer's decode bound: weight bytes per token) and a health metric of `ms-diagnose check`.
// Both call this one function with the STREAM kernel that fits them.
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

}  // namespace ms
