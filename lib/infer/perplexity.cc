#include "infer/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "infer/kv_cache.h"
#include "infer/quant_sensitivity.h"
#include "infer/quantized_model.h"
#include "infer/sampler.h"

namespace ms::infer {

namespace {

// The mean NLL's sum over (rows, vocab) logits and their targets.
double sum_nll(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab) {
  double nll = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * vocab;
    const double top = *std::max_element(row, row + vocab);
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double{row[v]} - top);
    nll += std::log(sum) + top - row[targets[r]];
  }
  return nll;
}

// Logits (rows, vocab) of windows [first, ...) of seq_len positions each, all finite; else the
// error naming the first bad window and position (a NaN would otherwise become the perplexity).
Status check_finite(const float* logits, int64_t rows, int64_t vocab, int64_t first,
                    int64_t seq_len) {
  const int64_t bad = first_non_finite_row(logits, rows, vocab);
  if (bad < 0) return Status::OK();
  return FailedPrecondition("the logits of window " + std::to_string(first + bad / seq_len) +
                            " at position " + std::to_string(bad % seq_len) +
                            " are not finite (inf or NaN): the model's weights or quantization "
                            "scales overflow float32");
}

Status check_batch(int64_t batch) {
  if (batch < 1) return InvalidArgument("--batch " + std::to_string(batch) + " must be 1 or more");
  return Status::OK();
}

}  // namespace

Result<Tensor> serving_logits(model::Transformer& model, const int32_t* inputs, int64_t n,
                              int64_t seq_len) {
  constexpr int64_t kBlockSize = 16;
  const int64_t per_window = (seq_len + kBlockSize - 1) / kBlockSize;
  KvCache cache(model.config(), n * per_window, kBlockSize);
  std::vector<int32_t> blocks(static_cast<size_t>(n * per_window));
  for (size_t b = 0; b < blocks.size(); ++b) blocks[b] = static_cast<int32_t>(b);
  std::vector<model::CachedChunk> chunks;
  for (int64_t i = 0; i < n; ++i) {
    model::CachedChunk c;
    c.tokens = std::span<const int32_t>(inputs + i * seq_len, static_cast<size_t>(seq_len));
    c.blocks = std::span<const int32_t>(blocks).subspan(static_cast<size_t>(i * per_window),
                                                        static_cast<size_t>(per_window));
    c.all_logits = true;
    chunks.push_back(c);
  }
  return model.forward_cached(chunks, cache.view());
}

Result<PerplexityResult> perplexity(model::Transformer& model, const TokenWindows& windows,
                                    int64_t batch, EvalForward forward) {
  MS_RETURN_IF_ERROR(check_batch(batch));
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
    if (forward == EvalForward::kServing) {
      MS_ASSIGN_OR_RETURN(const Tensor logits,
                          serving_logits(model, inputs.data(), n, windows.seq_len));
      MS_RETURN_IF_ERROR(check_finite(logits.data<float>(), n * windows.seq_len,
                                      model.config().vocab_size, first, windows.seq_len));
      nll += sum_nll(logits.data<float>(), targets.data(), n * windows.seq_len,
                     model.config().vocab_size);
      r.tokens += n * windows.seq_len;
      continue;
    }
    MS_ASSIGN_OR_RETURN(const model::LossStats loss,
                        model.forward_loss(inputs.data(), targets.data(), n, windows.seq_len));
    if (!std::isfinite(loss.loss)) {
      return FailedPrecondition("the loss over windows " + std::to_string(first) + ".." +
                                std::to_string(first + n - 1) +
                                " is not finite: the model's logits overflow float32");
    }
    nll += loss.loss * static_cast<double>(loss.tokens);
    r.tokens += loss.tokens;
  }
  r.windows = windows.count();
  r.mean_nll = r.tokens > 0 ? nll / static_cast<double>(r.tokens) : 0;
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

Result<double> mean_kl(model::Transformer& reference, model::Transformer& model,
                       const TokenWindows& windows, int64_t batch, EvalForward forward) {
  const int64_t V = model.config().vocab_size;
  if (reference.config().vocab_size != V) {
    return InvalidArgument("the reference model's vocabulary (" +
                           std::to_string(reference.config().vocab_size) +
                           ") differs from the model's (" + std::to_string(V) + ")");
  }
  MS_RETURN_IF_ERROR(check_batch(batch));
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
    MS_ASSIGN_OR_RETURN(Tensor q, forward == EvalForward::kServing
                                      ? serving_logits(model, inputs.data(), n, windows.seq_len)
                                      : model.forward_logits(inputs.data(), n, windows.seq_len));
    const int64_t r = n * windows.seq_len;
    MS_RETURN_IF_ERROR(check_finite(q.data<float>(), r, V, first, windows.seq_len));
    log_softmax_rows(p.data<float>(), r, V);
    log_softmax_rows(q.data<float>(), r, V);
    total += sum_kl_rows(p.data<float>(), q.data<float>(), r, V);
    rows += r;
  }
  return rows > 0 ? total / static_cast<double>(rows) : 0.0;
}

namespace {

// Whether serving `format` with `activations` rounds the activations
// (ops/quant_act.h).
bool rounds_activations(ops::WeightFormat format, ops::ActivationFormat activations) {
  return activations == ops::ActivationFormat::kInt8 &&
         (format == ops::WeightFormat::kInt8 || format == ops::WeightFormat::kInt4);
}

}  // namespace

Result<EvalModel> load_for_evaluation(const std::string& model_dir, const std::string& checkpoint,
                                      const WeightOptions& weights) {
  MS_RETURN_IF_ERROR(check_weight_options(weights));
  EvalModel m;
  if (!model_dir.empty() && checkpoint.empty()) {
    MS_ASSIGN_OR_RETURN(const bool quantized, is_quantized_model(model_dir));
    if (quantized) {
      if (weights.format != ops::WeightFormat::kF32) {
        return InvalidArgument("--weights " + std::string(ops::weight_format_name(weights.format)) +
                               ": " + model_dir +
                               " is already quantized; evaluate it without "
                               "--weights");
      }
      MS_ASSIGN_OR_RETURN(const FormatAssignment stored, quantized_model_formats(model_dir));
      bool serve = false;
      for (const auto& [name, f] : stored)
        serve = serve || rounds_activations(f.format, weights.activations);
      if (!serve) {
        MS_ASSIGN_OR_RETURN(m.loaded,
                            load_quantized_model(model_dir, {}, QuantizedValues::kDequantized));
        return m;
      }
      MS_ASSIGN_OR_RETURN(m.loaded, load_quantized_model(model_dir, {}, QuantizedValues::kServe,
                                                         weights.activations));
      m.forward = EvalForward::kServing;
      return m;
    }
  }
  if (rounds_activations(weights.format, weights.activations)) {
    MS_ASSIGN_OR_RETURN(m.loaded, load_model(model_dir, checkpoint, {}, weights));
    m.forward = EvalForward::kServing;
    return m;
  }
  MS_ASSIGN_OR_RETURN(m.loaded, load_model(model_dir, checkpoint));
  if (weights.format != ops::WeightFormat::kF32) {
    MS_RETURN_IF_ERROR(
        dequantize_in_place(*m.loaded.model, uniform_assignment(*m.loaded.model, weights)));
  }
  return m;
}

}  // namespace ms::infer
