// Double-precision reference implementations of the training operators, written the plain way
// (full score matrices, explicit loops) so they share no structure with lib/ops. The operator
// gradient test differentiates them by central differences, and the whole-model gradient test
// composes them into a reference transformer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ms::test::ref {

using Vec = std::vector<double>;

// ids: (n); table: (vocab, d) -> (n, d).
inline Vec embedding(const std::vector<int32_t>& ids, const Vec& table, int64_t d) {
  Vec out;
  for (int32_t id : ids) out.insert(out.end(), table.begin() + id * d, table.begin() + (id + 1) * d);
  return out;
}

// x: (n, d), w: (d) -> (n, d).
inline Vec rmsnorm(const Vec& x, const Vec& w, int64_t n, int64_t d, double eps) {
  Vec out(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t c = 0; c < d; ++c) ss += x[i * d + c] * x[i * d + c];
    const double r = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t c = 0; c < d; ++c) out[i * d + c] = w[c] * x[i * d + c] * r;
  }
  return out;
}

// x: (n, in), w: (out, in) -> (n, out).
inline Vec linear(const Vec& x, const Vec& w, int64_t n, int64_t in, int64_t out) {
  Vec y(n * out, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t c = 0; c < in; ++c) s += x[i * in + c] * w[o * in + c];
      y[i * out + o] = s;
    }
  }
  return y;
}

// x: (b, t, heads, hd), rotated by position with Hugging Face's rotate_half convention.
inline Vec rope(const Vec& x, int64_t b, int64_t t, int64_t heads, int64_t hd, double theta) {
  Vec out(x.size());
  const int64_t half = hd / 2;
  for (int64_t bt = 0; bt < b * t; ++bt) {
    const double pos = static_cast<double>(bt % t);
    for (int64_t h = 0; h < heads; ++h) {
      const double* v = x.data() + (bt * heads + h) * hd;
      double* o = out.data() + (bt * heads + h) * hd;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * std::pow(theta, -2.0 * i / hd);
        o[i] = v[i] * std::cos(angle) - v[i + half] * std::sin(angle);
        o[i + half] = v[i + half] * std::cos(angle) + v[i] * std::sin(angle);
      }
    }
  }
  return out;
}

// x: (n, heads, hd), token i rotated by positions[i].
inline Vec rope_at(const Vec& x, const std::vector<int64_t>& positions, int64_t heads, int64_t hd,
                   double theta) {
  Vec out(x.size());
  const int64_t half = hd / 2;
  for (size_t token = 0; token < positions.size(); ++token) {
    const double pos = static_cast<double>(positions[token]);
    for (int64_t h = 0; h < heads; ++h) {
      const double* v = x.data() + (static_cast<int64_t>(token) * heads + h) * hd;
      double* o = out.data() + (static_cast<int64_t>(token) * heads + h) * hd;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * std::pow(theta, -2.0 * i / hd);
        o[i] = v[i] * std::cos(angle) - v[i + half] * std::sin(angle);
        o[i + half] = v[i + half] * std::cos(angle) + v[i] * std::sin(angle);
      }
    }
  }
  return out;
}

struct AttentionDims {
  int64_t b, t, heads, kv_heads, hd, window;
};

// q: (b, t, heads, hd), k, v: (b, t, kv_heads, hd) -> (b, t, heads, hd); causal, optional window.
inline Vec attention(const Vec& q, const Vec& k, const Vec& v, const AttentionDims& s) {
  Vec out(q.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hd));
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / (s.heads / s.kv_heads);
      for (int64_t i = 0; i < s.t; ++i) {
        const double* qi = q.data() + ((b * s.t + i) * s.heads + h) * s.hd;
        Vec scores(s.t, -INFINITY);
        for (int64_t j = 0; j <= i; ++j) {
          if (s.window > 0 && j <= i - s.window) continue;
          const double* kj = k.data() + ((b * s.t + j) * s.kv_heads + g) * s.hd;
          double dot = 0;
          for (int64_t d = 0; d < s.hd; ++d) dot += qi[d] * kj[d];
          scores[j] = dot * scale;
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double& x : scores) sum += (x = std::exp(x - m));
        double* o = out.data() + ((b * s.t + i) * s.heads + h) * s.hd;
        for (int64_t j = 0; j <= i; ++j) {
          const double* vj = v.data() + ((b * s.t + j) * s.kv_heads + g) * s.hd;
          for (int64_t d = 0; d < s.hd; ++d) o[d] += scores[j] / sum * vj[d];
        }
      }
    }
  }
  return out;
}

struct MaskedAttentionDims {
  int64_t b, tq, tk, heads, kv_heads, hd, window;
};

// The general mask of ops/attention.h: query i of row b (global index qi[b * tq + i], document
// qd[...]) sees key j (ki, kd) iff ki <= qi, ki > qi - window when window > 0, and kd == qd
// when document ids are given (empty vectors: none). q: (b, tq, heads, hd), k, v: (b, tk,
// kv_heads, hd) -> (b, tq, heads, hd); lse (b, heads, tq) when asked for. A row that sees no
// key gives zeros and lse -inf.
inline Vec masked_attention(const Vec& q, const Vec& k, const Vec& v, const MaskedAttentionDims& s,
                            const std::vector<int64_t>& qi, const std::vector<int64_t>& ki,
                            const std::vector<int64_t>& qd, const std::vector<int64_t>& kd,
                            Vec* lse = nullptr) {
  Vec out(q.size(), 0.0);
  if (lse != nullptr) lse->assign(static_cast<size_t>(s.b * s.heads * s.tq), -INFINITY);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hd));
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / (s.heads / s.kv_heads);
      for (int64_t i = 0; i < s.tq; ++i) {
        const int64_t qn = b * s.tq + i;
        const double* qv = q.data() + (qn * s.heads + h) * s.hd;
        Vec scores(s.tk, -INFINITY);
        bool any = false;
        for (int64_t j = 0; j < s.tk; ++j) {
          const int64_t kn = b * s.tk + j;
          if (ki[kn] > qi[qn] || (s.window > 0 && ki[kn] <= qi[qn] - s.window)) continue;
          if (!qd.empty() && kd[kn] != qd[qn]) continue;
          const double* kv = k.data() + (kn * s.kv_heads + g) * s.hd;
          double dot = 0;
          for (int64_t d = 0; d < s.hd; ++d) dot += qv[d] * kv[d];
          scores[j] = dot * scale;
          any = true;
        }
        if (!any) continue;
        const double m = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double& x : scores) sum += (x = std::exp(x - m));
        if (lse != nullptr) (*lse)[(b * s.heads + h) * s.tq + i] = m + std::log(sum);
        double* o = out.data() + (qn * s.heads + h) * s.hd;
        for (int64_t j = 0; j < s.tk; ++j) {
          const double* vv = v.data() + ((b * s.tk + j) * s.kv_heads + g) * s.hd;
          for (int64_t d = 0; d < s.hd; ++d) o[d] += scores[j] / sum * vv[d];
        }
      }
    }
  }
  return out;
}

inline Vec swiglu(const Vec& gate, const Vec& up) {
  Vec out(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) out[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return out;
}

// x: (n, e) -> row softmax.
inline Vec softmax(const Vec& x, int64_t n, int64_t e) {
  Vec p(x.size());
  for (int64_t i = 0; i < n; ++i) {
    const double m = *std::max_element(x.begin() + i * e, x.begin() + (i + 1) * e);
    double sum = 0;
    for (int64_t j = 0; j < e; ++j) sum += (p[i * e + j] = std::exp(x[i * e + j] - m));
    for (int64_t j = 0; j < e; ++j) p[i * e + j] /= sum;
  }
  return p;
}

// logits: (n, vocab) -> per-row cross-entropy (n).
inline Vec cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t vocab) {
  const int64_t n = static_cast<int64_t>(targets.size());
  Vec loss(n);
  for (int64_t i = 0; i < n; ++i) {
    const double m = *std::max_element(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(logits[i * vocab + j] - m);
    loss[i] = m + std::log(sum) - logits[i * vocab + targets[i]];
  }
  return loss;
}

// The k experts of each row of probs (n, e) with the highest probability, highest first.
inline std::vector<int32_t> top_k(const Vec& probs, int64_t n, int64_t e, int64_t k) {
  std::vector<int32_t> chosen;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> order(e);
    for (int64_t j = 0; j < e; ++j) order[j] = static_cast<int32_t>(j);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return probs[i * e + a] > probs[i * e + b]; });
    chosen.insert(chosen.end(), order.begin(), order.begin() + k);
  }
  return chosen;
}

// Renormalized weights (n, k) of the chosen experts (n, k).
inline Vec routing_weights(const Vec& probs, const std::vector<int32_t>& chosen, int64_t e,
                           int64_t k) {
  const int64_t n = static_cast<int64_t>(chosen.size()) / k;
  Vec w(n * k);
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int64_t s = 0; s < k; ++s) sum += probs[i * e + chosen[i * k + s]];
    for (int64_t s = 0; s < k; ++s) w[i * k + s] = probs[i * e + chosen[i * k + s]] / sum;
  }
  return w;
}

// Load-balancing loss E * sum_e f_e * P_e with f_e the share of assignments to e.
inline double aux_loss(const Vec& probs, const std::vector<int32_t>& chosen, int64_t e) {
  const int64_t n = static_cast<int64_t>(probs.size()) / e;
  Vec f(e, 0.0), p(e, 0.0);
  for (int32_t x : chosen) f[x] += 1.0 / static_cast<double>(chosen.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < e; ++j) p[j] += probs[i * e + j] / static_cast<double>(n);
  }
  double loss = 0;
  for (int64_t j = 0; j < e; ++j) loss += f[j] * p[j];
  return static_cast<double>(e) * loss;
}

}  // namespace ms::test::ref
