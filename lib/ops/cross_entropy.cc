// Row-parallel fused softmax cross-entropy; the row sums are taken in double.
#include "ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

namespace {

bool holds(int64_t first, int64_t real, int32_t target) {
  return target >= first && target < first + real;
}

}  // namespace

void vocab_row_max(const float* logits, int64_t ld, int64_t real, float* max, int64_t n) {
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* row = logits + i * ld;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < real; ++j) m = std::max(m, row[j]);
      max[i] = m;
    }
  }, 16);
}

void vocab_local_sums(const float* logits, int64_t ld, int64_t real, int64_t first,
                      const int32_t* targets, const float* max, float* pairs, int64_t n) {
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* row = logits + i * ld;
      double sum = 0;
      for (int64_t j = 0; j < real; ++j) sum += std::exp(row[j] - max[i]);
      pairs[2 * i] = static_cast<float>(sum);
      pairs[2 * i + 1] = holds(first, real, targets[i]) ? row[targets[i] - first] : 0.0f;
    }
  }, 4);
}

void vocab_losses(const float* max, const float* pairs, float* lse, float* losses, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double row_lse = max[i] + std::log(static_cast<double>(pairs[2 * i]));
    lse[i] = static_cast<float>(row_lse);
    losses[i] = static_cast<float>(row_lse - pairs[2 * i + 1]);
  }
}

void vocab_local_grad(float* logits, int64_t ld, int64_t real, int64_t first,
                      const int32_t* targets, const float* lse, float grad_scale, int64_t n) {
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* row = logits + i * ld;
      for (int64_t j = 0; j < real; ++j) row[j] = grad_scale * std::exp(row[j] - lse[i]);
      for (int64_t j = real; j < ld; ++j) row[j] = 0.0f;
      if (holds(first, real, targets[i])) row[targets[i] - first] -= grad_scale;
    }
  }, 4);
}

}  // namespace ms::ops
