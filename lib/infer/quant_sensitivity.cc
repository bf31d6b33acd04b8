// Every measurement is one full forward over the calibration windows; a weight's f32 value is
// copied aside while its candidates are tried and copied back after.
#include "infer/quant_sensitivity.h"

#include <algorithm>
#include <cmath>

#include "core/host_metrics.h"
#include "ops/quant.h"

namespace ms::infer {
void log_softmax_rows(float* x, int64_t rows, int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * vocab;
    const float top = *std::max_element(row, row + vocab);
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v] - top));
    const float log_sum = static_cast<float>(std::log(sum)) + top;
    for (int64_t v = 0; v < vocab; ++v) row[v] -= log_sum;
  }
}

double sum_kl_rows(const float* log_p, const float* log_q, int64_t rows, int64_t vocab) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = log_p + r * vocab;
    const float* q = log_q + r * vocab;
    double kl = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      kl += std::exp(static_cast<double>(p[v])) * (static_cast<double>(p[v]) - q[v]);
    }
    total += std::max(kl, 0.0);
  }
  return total;
}

Result<KlReference> KlReference::create(model::Transformer& model, const TokenWindows& windows) {
  if (windows.seq_len > model.config().max_seq_len) {
    return InvalidArgument("--calibration-len " + std::to_string(windows.seq_len) +
                           " is longer than the model's max_seq_len " +
                           std::to_string(model.config().max_seq_len));
  }
  // The reference keeps every position's full distribution, and each measurement computes one
  // more of the same size: 100 windows of a GPT-2-sized vocabulary come to gigabytes, so the
  // count is checked against the machine before anything is sized by it.
  const double rows = static_cast<double>(windows.count()) * static_cast<double>(windows.seq_len);
  MS_RETURN_IF_ERROR(check_memory_need(
      2 * rows * static_cast<double>(model.config().vocab_size) * sizeof(float),
      "--calibration-samples (" + std::to_string(windows.count()) + " windows of " +
          std::to_string(windows.seq_len) + " tokens over a " +
          std::to_string(model.config().vocab_size) +
          "-token vocabulary: the reference log-probabilities and one measurement's)"));
  KlReference ref;
  ref.windows_ = &windows;
  ref.vocab_ = model.config().vocab_size;
  std::vector<int32_t> targets;
  windows.split(0, windows.count(), ref.inputs_, targets);
  MS_ASSIGN_OR_RETURN(Tensor logits,
                      model.forward_logits(ref.inputs_.data(), windows.count(), windows.seq_len));
  ref.log_probs_.assign(logits.data<float>(), logits.data<float>() + logits.numel());
  log_softmax_rows(ref.log_probs_.data(), logits.numel() / ref.vocab_, ref.vocab_);
  return ref;
}

Result<double> KlReference::kl(model::Transformer& model) const {
  MS_ASSIGN_OR_RETURN(Tensor logits, model.forward_logits(inputs_.data(), windows_->count(),
                                                          windows_->seq_len));
  float* q = logits.data<float>();
  const int64_t rows = logits.numel() / vocab_;
  log_softmax_rows(q, rows, vocab_);
  return sum_kl_rows(log_probs_.data(), q, rows, vocab_) / static_cast<double>(rows);
}

Result<double> KlReference::kl(model::Transformer& model, const FormatAssignment& formats) const {
  std::vector<std::pair<size_t, std::vector<float>>> saved;
  for (const auto& [name, f] : formats) {
    MS_ASSIGN_OR_RETURN(const size_t i, model.parameter_index(name));
    const Tensor& v = model.parameters()[i].value;
    saved.emplace_back(i, std::vector<float>(v.data<float>(), v.data<float>() + v.numel()));
  }
  Status applied = dequantize_in_place(model, formats);
  Result<double> kl = applied.ok() ? this->kl(model) : Result<double>(applied);
  for (const auto& [i, values] : saved) {
    std::copy(values.begin(), values.end(), model.parameters()[i].value.data<float>());
  }
  return kl;
}

Result<std::vector<AllocationItem>> measure_sensitivity(
    model::Transformer& model, const KlReference& reference,
    const std::function<void(size_t done, size_t total)>& progress) {
  std::vector<size_t> linear = model.cached_linear_parameters();
  std::sort(linear.begin(), linear.end());
  std::vector<AllocationItem> items;
  for (size_t i : linear) {
    const model::Parameter& p = model.parameters()[i];
    AllocationItem item{p.name, candidate_formats(p.global_shape[0], p.global_shape[1])};
    for (AllocationChoice& c : item.choices) {
      if (c.format.format == ops::WeightFormat::kF32) continue;
      MS_ASSIGN_OR_RETURN(c.error, reference.kl(model, {{p.name, c.format}}));
    }
    items.push_back(std::move(item));
    if (progress) progress(items.size(), linear.size());
  }
  return items;
}

}  // namespace ms::infer
