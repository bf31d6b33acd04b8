// The sensitivities the bit allocation (bit_allocation.h) weighs, after LLM-PQ: for each
// linear weight the serving kernels multiply by and each candidate format, the mean KL
// divergence KL(p_f32 || p_q) of the model's next-token distributions over calibration windows
// (token_windows.h) when only that weight is quantized so (dequantized in place, the values the
// kernels use), with every other weight in f32. KL of the final distribution sees the error
// through the rest of the network, which a layer's own output error does not. The model must
// hold its f32 weights (loaded without --weights); each is restored after its measurements.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "infer/bit_allocation.h"
#include "infer/quantized_model.h"
#include "infer/token_windows.h"
#include "model/transformer.h"

namespace ms::infer {

// Row-wise log-softmax of (rows, vocab) logits, in place.
void log_softmax_rows(float* x, int64_t rows, int64_t vocab);
// Sum over rows of KL(p || q) = sum_v p_v (log p_v - log q_v), from log-probabilities
// (rows, vocab); a row's rounding below zero counts as zero.
double sum_kl_rows(const float* log_p, const float* log_q, int64_t rows, int64_t vocab);

// The f32 model's log-probabilities over the calibration windows, (windows * seq_len, vocab).
class KlReference {
 public:
  // InvalidArgument for windows longer than the model's max_seq_len; forward_logits's errors.
  static Result<KlReference> create(model::Transformer& model, const TokenWindows& windows);

  // Mean KL(reference || model) over every position, with the model as it holds now.
  Result<double> kl(model::Transformer& model) const;
  // The same with `formats` applied (dequantized in place, then restored).
  Result<double> kl(model::Transformer& model, const FormatAssignment& formats) const;

 private:
  const TokenWindows* windows_ = nullptr;
  std::vector<int32_t> inputs_;
  std::vector<float> log_probs_;
  int64_t vocab_ = 0;
};

// One item per linear weight (in parameter order) with candidate_formats's choices, each with
// its measured KL (f32: 0). `progress(done, total)` is called after each weight when set.
Result<std::vector<AllocationItem>> measure_sensitivity(
    model::Transformer& model, const KlReference& reference,
    const std::function<void(size_t done, size_t total)>& progress = {});

}  // namespace ms::infer
