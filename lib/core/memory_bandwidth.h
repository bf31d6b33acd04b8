// The memory-bandwidth probes: after McCalpin's STREAM (copy, triad), a health metric of
// `ms-diagnose check` and the planner's profile; and a threaded read-only probe, the yardstick
// of work that only reads memory (ms-infer's decode bound: a step reads its weights, writes
// almost nothing, so copy bandwidth, half of it writes, is the wrong limit).
#pragma once

#include <cstddef>
#include <cstdint>

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

// Reads [p, p + bytes) as the read probe reads (vector loads, eight independent accumulators):
// a plain read of given memory, for benchmarks that set a kernel against reading the very bytes
// it reads. Any alignment and length. Returns a sum of the memory's 64-bit words (and of the
// bytes outside them) that changes with any one byte: its use is keeping the loads.
uint64_t read_bytes(const void* p, size_t bytes);

// The read probe taken a few passes at a time, its best and worst kept across them, so that
// passes can be taken between runs of the work it bounds: ms-infer bench reads between decode
// runs, so that the bound and the decode see the same machine (on a shared VM the probe moved by
// 2x from one minute to the next). Each run() allocates and touches its buffer and frees it
// after, so nothing is held between runs beside a model that may fill the memory.
class ReadProbe {
 public:
  // `bytes` rounded down to whole 64-byte lines, split into `threads` slices (as
  // measure_read_gbs's).
  ReadProbe(size_t bytes, int threads);

  // Takes `passes` more passes (at least 1); returns the best GB/s among them, 0 when the
  // buffer holds fewer lines than threads.
  double run(int passes);
  // Over every pass so far: the best and the worst GB/s, and how many; 0 before the first.
  double best_gbs() const { return best_gbs_; }
  double worst_gbs() const { return worst_gbs_; }
  int passes() const { return passes_; }
  size_t bytes() const;

 private:
  size_t lines_;
  int threads_;
  double best_gbs_ = 0, worst_gbs_ = 0;
  int passes_ = 0;
};

// The size of the largest CPU cache the OS reports (L3, else L2); 0 when it reports none.
size_t last_level_cache_bytes();

}  // namespace ms
