// Perplexity of a model over token windows (token_windows.h): exp of the mean cross-entropy of
// every window's seq_len next-token predictions, through the training model's full forward
// (model::Transformer::forward_loss). A quantized model is evaluated with its dequantized
// weights in f32, which are the values the serving kernels multiply by (the kernels and this
// forward agree within float rounding, serving_weights_test), so one figure per format
// compares the formats and nothing else. `ms-infer eval-ppl` prints it.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "infer/model_loader.h"
#include "infer/serving_weights.h"
#include "infer/token_windows.h"
#include "model/transformer.h"

namespace ms::infer {

struct PerplexityResult {
  double mean_nll = 0;    // nats per predicted token
  double perplexity = 0;  // exp(mean_nll)
  int64_t tokens = 0;     // predicted tokens
  int64_t windows = 0;
};

// Over all windows, `batch` at a time. InvalidArgument for a batch below 1, a window longer
// than the model's max_seq_len, and forward_loss's refusals (a token outside the vocabulary).
Result<PerplexityResult> perplexity(model::Transformer& model, const TokenWindows& windows,
                                    int64_t batch);

// Mean KL(reference || model) of the next-token distributions over every position of the
// windows, `batch` windows at a time: how far a quantized model's predictions moved from the
// f32 model's, on text the calibration never saw. InvalidArgument when the two models differ in
// vocabulary or the windows are longer than either's max_seq_len; forward_logits's errors.
Result<double> mean_kl(model::Transformer& reference, model::Transformer& model,
                       const TokenWindows& windows, int64_t batch);

// The model to evaluate: a Hugging Face directory or checkpoint (load_model) with its linear
// weights quantized and dequantized in place as `weights` says (f32: as loaded), or a quantized
// model directory (quantized_model.h) with its stored codes dequantized, where `weights` must
// be f32 (InvalidArgument naming --weights otherwise).
Result<LoadedModel> load_for_evaluation(const std::string& model_dir, const std::string& checkpoint,
                                        const WeightOptions& weights);

}  // namespace ms::infer
