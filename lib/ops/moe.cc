// MoE routing: a counting sort of the (token, slot) assignments by expert builds the dropless
// permutation; every other operator is a gather or weighted sum along it.
#include "ops/moe.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "ops/parallel.h"

namespace ms::ops {
namespace {

// The k largest of p[0..e), highest first, ties to the lower index.
void top_k_of_row(const float* p, int64_t e, int64_t k, int32_t* chosen) {
  for (int64_t s = 0; s < k; ++s) {
    int32_t best = -1;
    for (int64_t j = 0; j < e; ++j) {
      if (std::find(chosen, chosen + s, static_cast<int32_t>(j)) != chosen + s) continue;
      if (best < 0 || p[j] > p[best]) best = static_cast<int32_t>(j);
    }
    chosen[s] = best;
  }
}

// Groups the kept assignments by expert (every one unless `keep` says otherwise), tokens in
// order within each expert.
void build_permutation(MoeRouting& r, const std::vector<bool>* keep = nullptr) {
  const int64_t assignments = r.tokens * r.top_k;
  r.offsets.assign(r.experts + 1, 0);
  for (int64_t a = 0; a < assignments; ++a) {
    if (keep == nullptr || (*keep)[a]) ++r.offsets[r.expert[a] + 1];
  }
  for (int64_t e = 0; e < r.experts; ++e) r.offsets[e + 1] += r.offsets[e];
  std::vector<int64_t> next(r.offsets.begin(), r.offsets.end() - 1);
  r.row_of.assign(assignments, -1);
  r.token_of_row.resize(r.offsets.back());
  for (int64_t a = 0; a < assignments; ++a) {
    if (keep != nullptr && !(*keep)[a]) continue;
    const int64_t row = next[r.expert[a]]++;
    r.row_of[a] = row;
    r.token_of_row[row] = a / r.top_k;
  }
}

}  // namespace

MoeRouting moe_route(const float* probs, float* weights, int64_t n, int64_t e, int64_t k,
                     const float* bias) {
  assert(k >= 1 && k <= e);
  MoeRouting r;
  r.tokens = n;
  r.experts = e;
  r.top_k = k;
  r.expert.resize(n * k);
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      int32_t* chosen = r.expert.data() + i * k;
      if (bias == nullptr) {
        top_k_of_row(probs + i * e, e, k, chosen);
      } else {
        std::vector<float> scores(probs + i * e, probs + (i + 1) * e);
        for (int64_t j = 0; j < e; ++j) scores[static_cast<size_t>(j)] += bias[j];
        top_k_of_row(scores.data(), e, k, chosen);
      }
      float sum = 0;
      for (int64_t s = 0; s < k; ++s) sum += probs[i * e + chosen[s]];
      for (int64_t s = 0; s < k; ++s) weights[i * k + s] = probs[i * e + chosen[s]] / sum;
    }
  }, 64);
  r.routed.assign(e, 0);
  for (int32_t x : r.expert) ++r.routed[x];
  build_permutation(r);
  return r;
}

void moe_apply_capacity(MoeRouting& r, int64_t capacity) {
  if (capacity <= 0) return;
  const int64_t assignments = r.tokens * r.top_k;
  std::vector<bool> keep(assignments);
  std::vector<int64_t> taken(r.experts, 0);
  r.dropped = 0;
  // Token order, then slot order: an earlier token keeps its place before a later one.
  for (int64_t a = 0; a < assignments; ++a) {
    keep[a] = taken[r.expert[a]]++ < capacity;
    if (!keep[a]) ++r.dropped;
  }
  build_permutation(r, &keep);
}

int64_t moe_capacity(double factor, int64_t n, int64_t e, int64_t k) {
  if (!(factor > 0) || e < 1) return 0;
  const double c = std::ceil(factor * static_cast<double>(n * k) / static_cast<double>(e));
  return std::max<int64_t>(1, static_cast<int64_t>(c));
}

void moe_route_backward(const float* probs, const float* weights, const MoeRouting& r,
                        const float* dweights, float* dprobs) {
  const int64_t e = r.experts, k = r.top_k;
  parallel_for(r.tokens, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int32_t* chosen = r.expert.data() + i * k;
      float sum = 0, dot = 0;
      for (int64_t s = 0; s < k; ++s) {
        sum += probs[i * e + chosen[s]];
        dot += dweights[i * k + s] * weights[i * k + s];
      }
      for (int64_t s = 0; s < k; ++s) {
        dprobs[i * e + chosen[s]] += (dweights[i * k + s] - dot) / sum;
      }
    }
  }, 64);
}

void moe_permute_forward(const float* x, const MoeRouting& r, float* xp, int64_t d) {
  parallel_for(r.rows(), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      std::copy(x + r.token_of_row[row] * d, x + (r.token_of_row[row] + 1) * d, xp + row * d);
    }
  }, 16);
}

void moe_permute_backward(const float* dxp, const MoeRouting& r, float* dx, int64_t d) {
  parallel_for(r.tokens, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      for (int64_t s = 0; s < r.top_k; ++s) {
        const int64_t row = r.row_of[i * r.top_k + s];
        if (row < 0) continue;
        const float* src = dxp + row * d;
        for (int64_t c = 0; c < d; ++c) dx[i * d + c] += src[c];
      }
    }
  }, 16);
}

void moe_unpermute_forward(const float* yp, const float* weights, const MoeRouting& r, float* y,
                           int64_t d) {
  parallel_for(r.tokens, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      std::fill(y + i * d, y + (i + 1) * d, 0.0f);
      for (int64_t s = 0; s < r.top_k; ++s) {
        const int64_t row = r.row_of[i * r.top_k + s];
        if (row < 0) continue;
        const float w = weights[i * r.top_k + s];
        const float* src = yp + row * d;
        for (int64_t c = 0; c < d; ++c) y[i * d + c] += w * src[c];
      }
    }
  }, 16);
}

void moe_unpermute_backward(const float* yp, const float* weights, const MoeRouting& r,
                            const float* dy, float* dyp, float* dweights, int64_t d) {
  parallel_for(r.tokens, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* g = dy + i * d;
      for (int64_t s = 0; s < r.top_k; ++s) {
        const int64_t row = r.row_of[i * r.top_k + s];
        if (row < 0) continue;
        const float w = weights[i * r.top_k + s];
        float dot = 0;
        for (int64_t c = 0; c < d; ++c) {
          dyp[row * d + c] += w * g[c];
          dot += g[c] * yp[row * d + c];
        }
        dweights[i * r.top_k + s] += dot;
      }
    }
  }, 16);
}

double moe_aux_loss(const float* probs, const MoeRouting& r) {
  const double n = static_cast<double>(r.tokens);
  double loss = 0;
  for (int64_t e = 0; e < r.experts; ++e) {
    const double f = static_cast<double>(r.routed[e]) / (n * r.top_k);
    double p_sum = 0;
    for (int64_t i = 0; i < r.tokens; ++i) p_sum += probs[i * r.experts + e];
    loss += f * (p_sum / n);
  }
  return static_cast<double>(r.experts) * loss;
}

void moe_aux_loss_backward(const MoeRouting& r, float daux, float* dprobs) {
  const double n = static_cast<double>(r.tokens);
  std::vector<float> grad(r.experts);
  for (int64_t e = 0; e < r.experts; ++e) {
    const double f = static_cast<double>(r.routed[e]) / (n * r.top_k);
    grad[e] = static_cast<float>(daux * r.experts * f / n);
  }
  parallel_for(r.tokens, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      for (int64_t e = 0; e < r.experts; ++e) dprobs[i * r.experts + e] += grad[e];
    }
  }, 64);
}

void moe_update_expert_bias(const int64_t* counts, float* bias, int64_t e, double rate) {
  int64_t total = 0;
  for (int64_t j = 0; j < e; ++j) total += counts[j];
  const double mean = static_cast<double>(total) / static_cast<double>(e);
  for (int64_t j = 0; j < e; ++j) {
    const double offset = mean - static_cast<double>(counts[j]);
    const double sign = offset > 0 ? 1.0 : offset < 0 ? -1.0 : 0.0;
    bias[j] = static_cast<float>(bias[j] + sign * rate);
  }
}

}  // namespace ms::ops

namespace ms::ops {

void moe_probability_sums(const float* probs, int64_t n, int64_t e, double* sums) {
  for (int64_t j = 0; j < e; ++j) {
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += probs[i * e + j];
    sums[j] = total;
  }
}

double moe_z_loss(const float* logits, float* lse, int64_t n, int64_t e) {
  double z = 0;
  for (int64_t i = 0; i < n; ++i) {
    // logsumexp from the softmax's normalizer: lse = max + log(sum exp(l - max)).
    const float* row = logits + i * e;
    const float mx = *std::max_element(row, row + e);
    double sum = 0;
    for (int64_t j = 0; j < e; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
    lse[i] = static_cast<float>(mx + std::log(sum));
    z += static_cast<double>(lse[i]) * lse[i];
  }
  return z;
}

void moe_z_loss_backward(const float* probs, const float* lse, float scale, float* dlogits,
                         int64_t n, int64_t e) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = scale * lse[i];
    for (int64_t j = 0; j < e; ++j) dlogits[i * e + j] += g * probs[i * e + j];
  }
}

}  // namespace ms::ops
