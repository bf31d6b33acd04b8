// Row-parallel fused softmax cross-entropy; the row sums are taken in double.
#include "ops/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "ops/parallel.h"

namespace ms::ops {

void softmax_cross_entropy(float* logits, const int32_t* targets, float* losses, int64_t n,
                           int64_t vocab, float grad_scale, bool write_grad) {
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* row = logits + i * vocab;
      const float m = *std::max_element(row, row + vocab);
      double sum = 0;
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(row[j] - m);
      const double lse = m + std::log(sum);
      losses[i] = static_cast<float>(lse - row[targets[i]]);
      if (!write_grad) continue;
      const float lse_f = static_cast<float>(lse);
      for (int64_t j = 0; j < vocab; ++j) row[j] = grad_scale * std::exp(row[j] - lse_f);
      row[targets[i]] -= grad_scale;
    }
  }, 4);
}

}  // namespace ms::ops
