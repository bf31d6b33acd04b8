// Serving with weights in another format than the f32 the model trains with (ms-infer
// --weights f32|bf16|int8|int4, docs/infer.md): after loading, every linear weight the cached
// forward multiplies by (model::Transformer::cached_linear_parameters: attention, dense FFNs,
// routed and shared MoE experts, an untied lm_head) that this rank holds is quantized
// (ops/quant.h), its f32 value released, and the model's CachedLinear hook set to the fused
// kernels of ops/quant_gemm.h. The quantized copies live with the hook, which the model owns;
// training code never sees them. f32 leaves the model as loaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/transformer.h"
#include "ops/quant.h"
#include "ops/quant_act.h"

namespace ms::infer {

struct WeightOptions {
  ops::WeightFormat format = ops::WeightFormat::kF32;
  int64_t group_size = ops::kDefaultInt4GroupSize;  // int4 only
  // What the int8 and int4 weights multiply (ops/quant_act.h): int8 activations by default
  // (integer dot products); f32 ones are slower and slightly closer to f32 serving
  // (docs/infer.md, "Activations"). The same for every weight of a model: in a per-tensor
  // assignment (quantized_model.h) only format and group_size are read.
  ops::ActivationFormat activations = ops::ActivationFormat::kInt8;
};

// What quantize_for_serving did, for the log and the rank report.
struct ServingWeightStats {
  int64_t matrices = 0;        // linear weights converted
  int64_t f32_bytes = 0;       // their bytes as f32
  int64_t quantized_bytes = 0;  // their bytes now (values and scales)
  // Of these, the routed MoE experts' (a decoded token reads top_k of num_experts of them).
  int64_t routed_f32_bytes = 0, routed_quantized_bytes = 0;
};

// InvalidArgument naming the option when the group size is not one int4 accepts (checked for
// int4 only, so a default stays valid for the other formats).
Status check_weight_options(const WeightOptions& options);

// Converts the model's cached-forward linear weights that this rank holds (released ones are
// skipped: an expert rank of disaggregated serving converts only its own experts, an attention
// rank none) and installs the hook; nothing when options.format is f32. Errors name the tensor
// (a shape the group size does not divide, a non-finite weight); the model is unchanged then.
Result<ServingWeightStats> quantize_for_serving(model::Transformer& model,
                                                const WeightOptions& options);

// One converted linear weight: its index into model.parameters() and its quantized value.
struct ConvertedWeight {
  size_t param_index = 0;
  ops::QuantizedMatrix matrix;
};

// Installs matrices built elsewhere (a quantized model file, infer/quantized_model.h, or a
// per-tensor assignment) as quantize_for_serving does: their f32 values are released and the
// hook multiplies by them. InvalidArgument naming the tensor when an index is not one of
// cached_linear_parameters(), is listed twice, or its matrix has another shape than the
// parameter; the model is unchanged then. A matrix in f32 format is skipped (kept as loaded).
// The int8 and int4 matrices multiply `activations`.
Result<ServingWeightStats> install_quantized_weights(model::Transformer& model,
                                                     std::vector<ConvertedWeight> weights,
                                                     ops::ActivationFormat activations);

// Converts as a loader fills the model, so that loading a model to serve it quantized holds
// one f32 linear weight at a time beside the quantized ones, not every f32 weight at once:
// after_fill(i) quantizes parameter i when it is one of cached_linear_parameters() and the
// format is not f32, and releases its f32 value; finish() installs the hook over what was
// converted (install_quantized_weights). The caller checks the options first
// (check_weight_options), before reading anything. Errors name the tensor; the model is then
// left part converted, and the loader fails.
class LoadConverter {
 public:
  LoadConverter(model::Transformer& model, const WeightOptions& options);
  Status after_fill(size_t param_index);
  Result<ServingWeightStats> finish();

 private:
  model::Transformer& model_;
  WeightOptions options_;
  std::vector<bool> linear_;  // by parameter index
  std::vector<ConvertedWeight> converted_;
};

// "int4 (group 64) x int8 activations: 98 linear weights, 12.58 MB as f32 -> 1.77 MB" (or
// "f32"; bf16 names no activations, which stay f32).
std::string describe(const WeightOptions& options, const ServingWeightStats& stats);

}  // namespace ms::infer
