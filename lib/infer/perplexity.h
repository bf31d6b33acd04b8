// Perplexity of a model over token windows (token_windows.h): exp of the mean cross-entropy of
// every window's seq_len next-token predictions. Two forwards compute the logits:
//   - the training model's full forward (model::Transformer::forward_loss): a quantized model
//     is evaluated with its dequantized weights in f32, the values the serving kernels
//     multiply by when their activations are f32 (the kernels and this forward agree within
//     float rounding, serving_weights_test), so one figure per format compares the formats and
//     nothing else;
//   - the serving forward (forward_cached, every position's logits, through the quantized
//     kernels the model has installed): what is served, int8 activations included, whose
//     rounding the full forward does not see.
// `ms-infer eval-ppl` prints it.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "infer/model_loader.h"
#include "infer/serving_weights.h"
#include "infer/token_windows.h"
#include "model/transformer.h"

namespace ms::infer {

enum class EvalForward { kFull, kServing };

struct PerplexityResult {
  double mean_nll = 0;    // nats per predicted token
  double perplexity = 0;  // exp(mean_nll)
  int64_t tokens = 0;     // predicted tokens
  int64_t windows = 0;
};

// Over all windows, `batch` at a time. InvalidArgument for a batch below 1, a window longer
// than the model's max_seq_len, and the forward's refusals (a token outside the vocabulary).
Result<PerplexityResult> perplexity(model::Transformer& model, const TokenWindows& windows,
                                    int64_t batch, EvalForward forward = EvalForward::kFull);

// Mean KL(reference || model) of the next-token distributions over every position of the
// windows, `batch` windows at a time: how far a quantized model's predictions moved from the
// f32 model's, on text the calibration never saw. The reference runs the full forward, the
// model `forward`. InvalidArgument when the two models differ in vocabulary or the windows are
// longer than either's max_seq_len; the forwards' errors.
Result<double> mean_kl(model::Transformer& reference, model::Transformer& model,
                       const TokenWindows& windows, int64_t batch,
                       EvalForward forward = EvalForward::kFull);

// The logits of every position of n windows of seq_len tokens, inputs: (n, seq_len) as
// TokenWindows::split gives them, (n * seq_len, vocab) f32, through the model's serving
// forward (forward_logits' twin): each window one chunk from position 0 in a KV cache of its
// own.
Result<Tensor> serving_logits(model::Transformer& model, const int32_t* inputs, int64_t n,
                              int64_t seq_len);

// The model to evaluate and the forward that evaluates it: a Hugging Face directory or
// checkpoint (load_model) with its linear weights in `weights`' format (f32: as loaded), or a
// quantized model directory (quantized_model.h) as stored, where `weights` must be f32
// (InvalidArgument naming --weights otherwise). With int8 activations and any int8 or int4
// weight, the weights are installed in the serving kernels and the serving forward evaluates
// them; otherwise they are dequantized in place for the full forward.
struct EvalModel {
  LoadedModel loaded;
  EvalForward forward = EvalForward::kFull;
};
Result<EvalModel> load_for_evaluation(const std::string& model_dir, const std::string& checkpoint,
                                      const WeightOptions& weights);

}  // namespace ms::infer
