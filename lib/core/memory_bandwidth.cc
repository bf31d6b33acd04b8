// The STREAM-style memory-bandwidth probe; see memory_bandwidth.h.
#include "core/memory_bandwidth.h"

#include <algorithm>
#include <cstring>
#include <limits>

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

}  // namespace

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
