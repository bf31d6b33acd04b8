// One pairwise-sum template and one max-scan template, each instantiated for fp32 and bf16
// inputs through a per-element "load" (widen to fp32, square, or take |x|).
#include "ops/reduce.h"

#include <cmath>
#include <limits>

namespace ms::ops {
namespace {

inline float widen(float v) { return v; }
inline float widen(bf16 v) { return bf16_to_float(v.bits); }

struct Identity {
  template <typename T>
  float operator()(T v) const {
    return widen(v);
  }
};
struct Square {
  template <typename T>
  float operator()(T v) const {
    const float f = widen(v);
    return f * f;
  }
};
struct Absolute {
  template <typename T>
  float operator()(T v) const {
    return std::fabs(widen(v));
  }
};

// Sums load(x[i]) over [0, n): blocks of kPairwiseBlock left to right, halves added pairwise.
template <typename T, typename Load>
float pairwise_sum(const T* x, size_t n, Load load) {
  if (n <= kPairwiseBlock) {
    float acc = 0.0f;
    for (size_t i = 0; i < n; ++i) acc += load(x[i]);
    return acc;
  }
  const size_t half = n / 2;
  return pairwise_sum(x, half, load) + pairwise_sum(x + half, n - half, load);
}

// The larger of a and b, or NaN when either is NaN (std::max would drop a NaN in b).
inline float max_keeping_nan(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
  return a > b ? a : b;
}

template <typename T, typename Load>
float max_scan(const T* x, size_t n, float identity, Load load) {
  float best = identity;
  for (size_t i = 0; i < n; ++i) best = max_keeping_nan(best, load(x[i]));
  return best;
}

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

}  // namespace

float sum(const float* x, size_t n) { return pairwise_sum(x, n, Identity{}); }
float sum(const bf16* x, size_t n) { return pairwise_sum(x, n, Identity{}); }
float sum_of_squares(const float* x, size_t n) { return pairwise_sum(x, n, Square{}); }
float sum_of_squares(const bf16* x, size_t n) { return pairwise_sum(x, n, Square{}); }
double sum_of_squares_f64(const float* x, size_t n) {
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
  return total;
}
float max(const float* x, size_t n) { return max_scan(x, n, kNegativeInfinity, Identity{}); }
float max(const bf16* x, size_t n) { return max_scan(x, n, kNegativeInfinity, Identity{}); }
float absmax(const float* x, size_t n) { return max_scan(x, n, 0.0f, Absolute{}); }
float absmax(const bf16* x, size_t n) { return max_scan(x, n, 0.0f, Absolute{}); }

}  // namespace ms::ops
