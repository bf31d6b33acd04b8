// SwiGLU and softmax: elementwise or row-parallel loops, no cross-thread reductions.
#include "ops/activation.h"

#include <algorithm>
#include <cmath>

#include "ops/parallel.h"

namespace ms::ops {
namespace {

inline float sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

}  // namespace

// Chunks of at least 1024: a decode step's one row of a 5632-wide FFN then splits evenly over
// two threads (with 4096 the calling thread took 4096 of the 5632 sigmoids, the other 1536).
void swiglu_forward(const float* gate, const float* up, float* out, int64_t n) {
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
  }, 1024);
}

// silu'(g) = s * (1 + g * (1 - s)) with s = sigmoid(g).
void swiglu_backward(const float* gate, const float* up, const float* dout, float* dgate,
                     float* dup, int64_t n) {
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float g = gate[i], s = sigmoid(g);
      dgate[i] += dout[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
      dup[i] += dout[i] * (g * s);
    }
  }, 4096);
}

void softmax_forward(const float* x, float* p, int64_t n, int64_t e) {
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* xi = x + i * e;
      float* pi = p + i * e;
      const float m = *std::max_element(xi, xi + e);
      double sum = 0;
      for (int64_t j = 0; j < e; ++j) {
        pi[j] = std::exp(xi[j] - m);
        sum += pi[j];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < e; ++j) pi[j] *= inv;
    }
  }, 16);
}

void softmax_backward(const float* p, const float* dp, float* dx, int64_t n, int64_t e) {
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* pi = p + i * e;
      const float* gi = dp + i * e;
      double dot = 0;
      for (int64_t j = 0; j < e; ++j) dot += double{pi[j]} * gi[j];
      for (int64_t j = 0; j < e; ++j) dx[i * e + j] += pi[j] * (gi[j] - static_cast<float>(dot));
    }
  }, 16);
}

}  // namespace ms::ops
