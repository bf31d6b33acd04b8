// The sgemm-rate probe; see sgemm_rate.h.
#include "ops/sgemm_rate.h"

#include <algorithm>
#include <vector>

#include "core/timer.h"
#include "ops/gemm.h"

namespace ms::ops {

double measure_sgemm_gflops(int64_t n, int min_reps, double min_seconds) {
  const size_t elements = static_cast<size_t>(n * n);
  std::vector<float> a(elements), b(elements), c(elements, 0.0f);
  for (size_t i = 0; i < elements; ++i) {
    a[i] = static_cast<float>(i % 7 + 1) * 0.25f;
    b[i] = static_cast<float>(i % 5 + 1) * 0.5f;
  }
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) *
                       static_cast<double>(n);
  double best_s = 1e30;
  Stopwatch total;
  for (int rep = 0; rep < std::max(min_reps, 1) || total.elapsed_s() < min_seconds; ++rep) {
    Stopwatch one;
    sgemm(Transpose::kNo, Transpose::kNo, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
          n);
    best_s = std::min(best_s, one.elapsed_s());
  }
  return flops / best_s / 1e9;
}

}  // namespace ms::ops
