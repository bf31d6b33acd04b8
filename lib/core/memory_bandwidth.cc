// The STREAM-style memory-bandwidth probe; see memory_bandwidth.h.
#include "core/memory_bandwidth.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "core/huge_pages.h"
#include "core/timer.h"

namespace ms {

namespace {

double run_kernel(StreamKernel kernel, HugePageVector<double>& a, const HugePageVector<double>& b,
                  const HugePageVector<double>& c) {
  constexpr double kScalar = 3.0;
  Stopwatch watch;
  if (kernel == StreamKernel::kCopy) {
    std::memcpy(a.data(), b.data(), a.size() * sizeof(double));
  } else {
    for (size_t i = 0; i < a.size(); ++i) a[i] = b[i] + kScalar * c[i];
  }
  return watch.elapsed_s();
}

// Two 64-bit lanes, the vector every x86-64 and aarch64 build has (SSE2, NEON): two such loads a
// cycle already outrun memory several times over on one core, so no per-instruction-set file.
using Vec = uint64_t __attribute__((vector_size(16)));
constexpr size_t kLineBytes = 64;
constexpr size_t kVecsPerLine = kLineBytes / sizeof(Vec);

// Sums `lines` 64-byte lines from p with eight independent accumulators (two lines a turn, all
// in registers), so consecutive loads do not wait on one add chain; the result only keeps the
// loads from being dropped.
// Written out rather than as an array: GCC at -O2 keeps an array of accumulators in memory.
uint64_t sum_lines(const Vec* p, size_t lines) {
  Vec a0 = {}, a1 = {}, a2 = {}, a3 = {}, a4 = {}, a5 = {}, a6 = {}, a7 = {};
  const size_t vecs = lines * kVecsPerLine;  // a multiple of 4
  size_t i = 0;
  for (; i + 8 <= vecs; i += 8) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
    a4 += p[i + 4];
    a5 += p[i + 5];
    a6 += p[i + 6];
    a7 += p[i + 7];
  }
  for (; i < vecs; ++i) a0 += p[i];
  const Vec s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
  return s[0] + s[1];
}

}  // namespace

uint64_t read_bytes(const void* p, size_t bytes) {
  const auto* c = static_cast<const uint8_t*>(p);
  uint64_t sum = 0;
  for (; bytes > 0 && reinterpret_cast<uintptr_t>(c) % alignof(Vec) != 0; --bytes) sum += *c++;
  const size_t lines = bytes / kLineBytes;
  sum += sum_lines(reinterpret_cast<const Vec*>(c), lines);
  for (size_t i = lines * kLineBytes; i < bytes; ++i) sum += c[i];
  return sum;
}

ReadProbe::ReadProbe(size_t bytes, int threads)
    : lines_(bytes / kLineBytes), threads_(std::max(threads, 1)) {}

size_t ReadProbe::bytes() const { return lines_ * kLineBytes; }

double ReadProbe::run(int passes) {
  passes = std::max(passes, 1);
  const size_t lines = lines_;
  const int threads = threads_;
  if (lines < static_cast<size_t>(threads)) return 0;
  // 64-byte aligned (core/huge_pages.h) and touched: no page faults are timed.
  const HugePageVector<uint64_t> buffer(lines * (kLineBytes / sizeof(uint64_t)), 1);
  const Vec* vecs = reinterpret_cast<const Vec*>(buffer.data());
  // Every thread starts each pass at one barrier and ends it at another; thread 0 times the
  // span between them, so a pass lasts until its slowest slice is read.
  std::barrier start(threads), done(threads);
  std::atomic<uint64_t> sink{0};
  std::vector<double> seconds;
  const auto read_slices = [&](int t) {
    const size_t begin = lines * static_cast<size_t>(t) / static_cast<size_t>(threads);
    const size_t end = lines * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
    for (int pass = 0; pass < passes; ++pass) {
      start.arrive_and_wait();
      Stopwatch watch;
      const uint64_t sum = sum_lines(vecs + begin * kVecsPerLine, end - begin);
      done.arrive_and_wait();
      if (t == 0) seconds.push_back(watch.elapsed_s());
      sink.fetch_add(sum, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(read_slices, t);
  read_slices(0);
  for (std::thread& w : workers) w.join();
  double best = 0;
  for (double s : seconds) {
    const double gbs = static_cast<double>(lines * kLineBytes) / s / 1e9;
    best = std::max(best, gbs);
    worst_gbs_ = passes_ == 0 ? gbs : std::min(worst_gbs_, gbs);
    best_gbs_ = std::max(best_gbs_, gbs);
    ++passes_;
  }
  return best;
}

double measure_read_gbs(size_t bytes, int threads, int reps) {
  ReadProbe probe(bytes, threads);
  return probe.run(reps);
}

size_t last_level_cache_bytes() {
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long size = sysconf(name);
    if (size > 0) return static_cast<size_t>(size);
  }
  return 0;
}

double measure_stream_gbs(StreamKernel kernel, size_t elements, int reps) {
  if (elements == 0) return 0;
  // Huge-page backed as the serving weights are, so the probe measures the same kind of memory.
  HugePageVector<double> a(elements, 0.0), b(elements, 1.0), c(elements, 2.0);
  double best_s = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < std::max(reps, 1); ++rep) {
    best_s = std::min(best_s, run_kernel(kernel, a, b, c));
    // Reading a[] and feeding it back keeps the compiler from dropping a repetition.
    b[rep % elements] = a[(elements - 1 - rep) % elements];
  }
  const double arrays = kernel == StreamKernel::kCopy ? 2.0 : 3.0;
  return arrays * sizeof(double) * static_cast<double>(elements) / best_s / 1e9;
}

}  // namespace ms
