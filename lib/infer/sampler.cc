// Sampling (infer/sampler.h): candidates sorted by logit, cut by top-k, softmax at the
// temperature in double, cut by top-p, then one Philox uniform picks from the cumulative sum.
// When top-k and top-p cut nothing, the sort is skipped and the sum runs in id order.
#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/philox.h"

namespace ms::infer {

int64_t first_non_finite_row(const float* logits, int64_t rows, int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * vocab;
    if (!std::all_of(row, row + vocab, [](float x) { return std::isfinite(x); })) return r;
  }
  return -1;
}

int32_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

namespace {

// Token ids ordered by logit (descending), ties by id, cut to the top k (k = 0: all).
std::vector<int32_t> ranked_candidates(const float* logits, int64_t vocab, int64_t top_k) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  const auto better = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const int64_t keep = top_k > 0 ? std::min(top_k, vocab) : vocab;
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), better);
  ids.resize(static_cast<size_t>(keep));
  return ids;
}

// Probabilities of the ranked candidates at `temperature`, cut to the top-p nucleus.
std::vector<double> nucleus(const float* logits, const std::vector<int32_t>& ids,
                            double temperature, double top_p) {
  std::vector<double> p(ids.size());
  const double top = logits[ids[0]];
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    p[i] = std::exp((logits[ids[i]] - top) / temperature);
    sum += p[i];
  }
  double cumulative = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] /= sum;
    cumulative += p[i];
    if (cumulative >= top_p) {
      p.resize(i + 1);
      break;
    }
  }
  return p;
}

// Whether top-k and top-p keep every token, so that no ranking is needed.
bool keeps_everything(const SamplingParams& params, int64_t vocab) {
  return (params.top_k <= 0 || params.top_k >= vocab) && params.top_p >= 1.0;
}

double sample_uniform(const SamplingParams& params, int64_t index) {
  return uniform(params.seed, stream_id("ms.infer.sample"), static_cast<uint64_t>(index));
}

}  // namespace

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     int64_t index) {
  if (params.temperature <= 0) return argmax(logits, vocab);
  if (keeps_everything(params, vocab)) {
    // The cumulative sum in id order: the same distribution as in ranked order, without
    // sorting the whole vocabulary for every token.
    return sample_distribution(token_distribution(logits, vocab, params),
                               sample_uniform(params, index));
  }
  const std::vector<int32_t> ids = ranked_candidates(logits, vocab, params.top_k);
  const std::vector<double> p = nucleus(logits, ids, params.temperature, params.top_p);
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  const double u = sample_uniform(params, index) * total;
  double cumulative = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    cumulative += p[i];
    if (u < cumulative) return ids[i];
  }
  return ids[p.size() - 1];
}

std::vector<double> token_distribution(const float* logits, int64_t vocab,
                                       const SamplingParams& params) {
  std::vector<double> out(static_cast<size_t>(vocab), 0.0);
  if (keeps_everything(params, vocab)) {
    const double top = logits[argmax(logits, vocab)];
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      out[i] = std::exp((logits[i] - top) / params.temperature);
      sum += out[i];
    }
    for (double& x : out) x /= sum;
    return out;
  }
  const std::vector<int32_t> ids = ranked_candidates(logits, vocab, params.top_k);
  const std::vector<double> p = nucleus(logits, ids, params.temperature, params.top_p);
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  for (size_t i = 0; i < p.size(); ++i) out[static_cast<size_t>(ids[i])] = p[i] / total;
  return out;
}

int32_t sample_distribution(std::span<const double> probs, double u) {
  const double total = std::accumulate(probs.begin(), probs.end(), 0.0);
  const double target = u * total;
  double cumulative = 0;
  int32_t last = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    cumulative += probs[i];
    last = static_cast<int32_t>(i);
    if (target < cumulative) return last;
  }
  return last;
}

}  // namespace ms::infer
