#include "rl/actor.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ms::rl {

Result<PackedSamples> pack_samples(std::span<const Sample* const> samples, int32_t pad,
                                   int64_t max_seq_len) {
  PackedSamples p;
  p.B = static_cast<int64_t>(samples.size());
  for (size_t b = 0; b < samples.size(); ++b) {
    const Sample& s = *samples[b];
    if (s.prompt.empty()) return InvalidArgument("sample " + std::to_string(b) + " has an empty prompt");
    const int64_t len = static_cast<int64_t>(s.prompt.size() + s.response.size()) - 1;
    if (len > max_seq_len) {
      return InvalidArgument("sample of " + std::to_string(len + 1) +
                             " tokens exceeds the model's context (model.max_seq_len " +
                             std::to_string(max_seq_len) + ")");
    }
    p.T = std::max(p.T, len);
  }
  p.T = std::max<int64_t>(p.T, 1);
  p.inputs.assign(static_cast<size_t>(p.B * p.T), pad);
  p.targets.assign(static_cast<size_t>(p.B * p.T), pad);
  for (size_t b = 0; b < samples.size(); ++b) {
    const Sample& s = *samples[b];
    std::vector<int32_t> all = s.prompt;
    all.insert(all.end(), s.response.begin(), s.response.end());
    const int64_t row = static_cast<int64_t>(b) * p.T;
    for (size_t t = 0; t + 1 < all.size(); ++t) {
      p.inputs[static_cast<size_t>(row) + t] = all[t];
      p.targets[static_cast<size_t>(row) + t] = all[t + 1];
    }
    for (size_t j = 0; j < s.response.size(); ++j) {
      p.positions.push_back(row + static_cast<int64_t>(s.prompt.size() - 1 + j));
    }
  }
  return p;
}

Status for_each_micro_batch(std::span<const Sample* const> samples, int64_t micro_batch,
                            int32_t pad, int64_t max_seq_len,
                            const std::function<Status(const PackedSamples&)>& fn) {
  const auto step = static_cast<size_t>(micro_batch);
  for (size_t first = 0; first < samples.size(); first += step) {
    const auto chunk = samples.subspan(first, std::min(samples.size() - first, step));
    MS_ASSIGN_OR_RETURN(const PackedSamples p, pack_samples(chunk, pad, max_seq_len));
    if (!p.positions.empty()) MS_RETURN_IF_ERROR(fn(p));
  }
  return Status::OK();
}

Result<ResponseLayout> response_layout(std::span<const Sample* const> samples) {
  std::vector<int64_t> lengths;
  lengths.reserve(samples.size());
  for (const Sample* s : samples) lengths.push_back(static_cast<int64_t>(s->response.size()));
  return ResponseLayout::from_lengths(lengths);
}

Result<PolicyEval> evaluate_policy(model::Transformer& model,
                                   std::span<const Sample* const> samples, int64_t micro_batch,
                                   int32_t pad_token) {
  PolicyEval out;
  MS_RETURN_IF_ERROR(for_each_micro_batch(samples, micro_batch, pad_token,
                                          model.config().max_seq_len,
                                          [&](const PackedSamples& p) -> Status {
    MS_ASSIGN_OR_RETURN(const model::Transformer::TokenLogProbs t,
                        model.forward_log_probs(p.inputs.data(), p.targets.data(), p.B, p.T,
                                                p.positions));
    out.log_probs.insert(out.log_probs.end(), t.log_probs.begin(), t.log_probs.end());
    out.entropy.insert(out.entropy.end(), t.entropy.begin(), t.entropy.end());
    return Status::OK();
  }));
  return out;
}

Status backward_policy(model::Transformer& model, std::span<const Sample* const> samples,
                       std::span<const double> grad_log_probs, int64_t micro_batch,
                       int32_t pad_token) {
  size_t next = 0;  // index into grad_log_probs
  std::vector<float> weights;
  MS_RETURN_IF_ERROR(for_each_micro_batch(samples, micro_batch, pad_token,
                                          model.config().max_seq_len,
                                          [&](const PackedSamples& p) -> Status {
    if (next + p.positions.size() > grad_log_probs.size()) {
      return InvalidArgument("gradient has fewer entries than the samples' response tokens");
    }
    weights.assign(static_cast<size_t>(p.B * p.T), 0.0f);
    for (int64_t pos : p.positions) {
      weights[static_cast<size_t>(pos)] = static_cast<float>(-grad_log_probs[next++]);
    }
    return model.forward_backward_weighted(p.inputs.data(), p.targets.data(), weights, p.B, p.T)
        .status();
  }));
  if (next != grad_log_probs.size()) {
    return InvalidArgument("gradient has more entries (" + std::to_string(grad_log_probs.size()) +
                           ") than the samples' response tokens (" + std::to_string(next) + ")");
  }
  return Status::OK();
}

}  // namespace ms::rl
