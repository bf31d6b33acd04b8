// Rotary embedding: one rotation routine with a sign, for the forward and its inverse.
#include "ops/rope.h"

#include <cmath>

#include "ops/parallel.h"

namespace ms::ops {
namespace {

// Rotates every head of each of n tokens by +angle (sign 1) or -angle (sign -1): token i at
// positions[i], or at i % t when positions is null.
void rotate(float* x, const RopeTable& table, int64_t n, int64_t t, const int64_t* positions,
            int64_t heads, float sign) {
  const int64_t half = table.half, hd = 2 * half;
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t token = lo; token < hi; ++token) {
      const int64_t pos = positions != nullptr ? positions[token] : token % t;
      const float* c = table.cos.data() + pos * half;
      const float* s = table.sin.data() + pos * half;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (token * heads + h) * hd;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = v[i], x2 = v[i + half], sn = sign * s[i];
          v[i] = x1 * c[i] - x2 * sn;
          v[i + half] = x2 * c[i] + x1 * sn;
        }
      }
    }
  }, 16);
}

}  // namespace

RopeTable make_rope_table(int64_t seq_len, int64_t head_dim, double theta) {
  RopeTable table;
  table.seq_len = seq_len;
  table.half = head_dim / 2;
  table.cos.resize(static_cast<size_t>(seq_len * table.half));
  table.sin.resize(table.cos.size());
  for (int64_t p = 0; p < seq_len; ++p) {
    for (int64_t i = 0; i < table.half; ++i) {
      const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / head_dim);
      const double angle = static_cast<double>(p) * inv_freq;
      table.cos[p * table.half + i] = static_cast<float>(std::cos(angle));
      table.sin[p * table.half + i] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

void rope_forward(float* x, const RopeTable& table, int64_t b, int64_t t, int64_t heads) {
  rotate(x, table, b * t, t, nullptr, heads, 1.0f);
}

void rope_backward(float* dx, const RopeTable& table, int64_t b, int64_t t, int64_t heads) {
  rotate(dx, table, b * t, t, nullptr, heads, -1.0f);
}

void rope_forward_at(float* x, const RopeTable& table, const int64_t* positions, int64_t n,
                     int64_t heads) {
  rotate(x, table, n, 1, positions, heads, 1.0f);
}

void rope_backward_at(float* dx, const RopeTable& table, const int64_t* positions, int64_t n,
                      int64_t heads) {
  rotate(dx, table, n, 1, positions, heads, -1.0f);
}

}  // namespace ms::ops
