#include "infer/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "infer/quant_sensitivity.h"
#include "infer/quantized_model.h"

namespace ms::infer {

Result<PerplexityResult> perplexity(model::Transformer& model, const TokenWindows& windows,
                                    int64_t batch) {
  if (batch < 1) return InvalidArgument("--batch " + std::to_string(batch) + " must be 1 or more");
  if (windows.seq_len > model.config().max_seq_len) {
    return InvalidArgument("--seq-len " + std::to_string(windows.seq_len) +
                           " is longer than the model's max_seq_len " +
                           std::to_string(model.config().max_seq_len));
  }
  PerplexityResult r;
  double nll = 0;
  std::vector<int32_t> inputs, targets;
  for (int64_t first = 0; first < windows.count(); first += batch) {
    const int64_t n = std::min(batch, windows.count() - first);
    windows.split(first, n, inputs, targets);
    MS_ASSIGN_OR_RETURN(const model::LossStats loss,
                        model.forward_loss(inputs.data(), targets.data(), n, windows.seq_len));
    nll += loss.loss * static_cast<double>(loss.tokens);
    r.tokens += loss.tokens;
  }
  r.windows = windows.count();
  r.mean_nll = r.tokens > 0 ? nll / static_cast<double>(r.tokens) : 0;
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

Result<double> mean_kl(model::Transformer& reference, model::Transformer& model,
                       const TokenWindows& windows, int64_t batch) {
  const int64_t V = model.config().vocab_size;
  if (reference.config().vocab_size != V) {
    return InvalidArgument("the reference model's vocabulary (" +
                           std::to_string(reference.config().vocab_size) +
                           ") differs from the model's (" + std::to_string(V) + ")");
  }
  if (batch < 1) return InvalidArgument("--batch " + std::to_string(batch) + " must be 1 or more");
  const int64_t max_len = std::min(model.config().max_seq_len, reference.config().max_seq_len);
  if (windows.seq_len > max_len) {
    return InvalidArgument("--seq-len " + std::to_string(windows.seq_len) +
                           " is longer than the models' max_seq_len " + std::to_string(max_len));
  }
  double total = 0;
  int64_t rows = 0;
  std::vector<int32_t> inputs, targets;
  for (int64_t first = 0; first < windows.count(); first += batch) {
    const int64_t n = std::min(batch, windows.count() - first);
    windows.split(first, n, inputs, targets);
    MS_ASSIGN_OR_RETURN(Tensor p, reference.forward_logits(inputs.data(), n, windows.seq_len));
    MS_ASSIGN_OR_RETURN(Tensor q, model.forward_logits(inputs.data(), n, windows.seq_len));
    const int64_t r = n * windows.seq_len;
    log_softmax_rows(p.data<float>(), r, V);
    log_softmax_rows(q.data<float>(), r, V);
    total += sum_kl_rows(p.data<float>(), q.data<float>(), r, V);
    rows += r;
  }
  return rows > 0 ? total / static_cast<double>(rows) : 0.0;
}

Result<LoadedModel> load_for_evaluation(const std::string& model_dir, const std::string& checkpoint,
                                        const WeightOptions& weights) {
  MS_RETURN_IF_ERROR(check_weight_options(weights));
  if (!model_dir.empty() && checkpoint.empty()) {
    MS_ASSIGN_OR_RETURN(const bool quantized, is_quantized_model(model_dir));
    if (quantized) {
      if (weights.format != ops::WeightFormat::kF32) {
        return InvalidArgument("--weights " + std::string(ops::weight_format_name(weights.format)) +
                               ": " + model_dir + " is already quantized; evaluate it without "
                               "--weights");
      }
      return load_quantized_model(model_dir, {}, QuantizedValues::kDequantized);
    }
  }
  MS_ASSIGN_OR_RETURN(LoadedModel loaded, load_model(model_dir, checkpoint));
  if (weights.format != ops::WeightFormat::kF32) {
    MS_RETURN_IF_ERROR(
        dequantize_in_place(*loaded.model, uniform_assignment(*loaded.model, weights)));
  }
  return loaded;
}

}  // namespace ms::infer
