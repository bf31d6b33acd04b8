// Quantized model directories (`ms-infer quantize`, docs/formats/quantized-model.md): a Hugging
// Face-style directory whose model.safetensors holds the linear weights the serving kernels
// multiply by (q/k/v/o, gate/up/down of dense FFNs and of routed and shared MoE experts, an
// untied lm_head) already quantized, each in its own format, so serving loads the codes and
// scales instead of quantizing at every start. The
// codes are `<name>.qweight` and the scales `<name>.scales`; the safetensors metadata key
// "ms_quantization" records each quantized tensor's format, group size and shape. Every other
// tensor stays F32 under its own name, and config.json and tokenizer.json are those of a plain
// model directory, so the quantization is in exactly one place.
//
// Quantizing a weight here and quantizing it at load (--weights) run the same function on the
// same f32 values, so a saved model holds bitwise the codes and scales `--weights X` builds.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "infer/model_loader.h"
#include "infer/serving_weights.h"
#include "model/transformer.h"

namespace ms::infer {

// The safetensors metadata key of a quantized model and the version of its JSON.
inline constexpr char kQuantizationMetadataKey[] = "ms_quantization";
inline constexpr int kQuantizedModelVersion = 1;

// Parameter name -> the format it is stored in. A linear weight the map leaves out stays f32.
using FormatAssignment = std::map<std::string, WeightOptions>;

// The same format for every linear weight of `model` (cached_linear_parameters): what
// `--weights X --group-size G` does at load.
FormatAssignment uniform_assignment(const model::Transformer& model, const WeightOptions& options);

// Quantizes the model's linear weights as `formats` says (f32 entries are left out of the
// result). InvalidArgument naming the tensor when it is not a linear weight of the model, when
// the group size is not 32, 64 or 128 or does not divide its inputs, or a weight is not finite.
Result<std::vector<ConvertedWeight>> quantize_assignment(const model::Transformer& model,
                                                         const FormatAssignment& formats);

// Replaces, in f32, each weight `formats` names by its quantized-then-dequantized value: the
// weights the serving kernels multiply by, for the full forward (perplexity, sensitivities).
// Errors are quantize_assignment's; the model is unchanged then.
Status dequantize_in_place(model::Transformer& model, const FormatAssignment& formats);

// Writes dir/model.safetensors (the quantized tensors as above, the others F32, a tied lm_head
// omitted), dir/config.json and a copy of the file tokenizer_json as dir/tokenizer.json, each
// atomically; creates dir if needed. Errors are quantize_assignment's and the files'.
Status save_quantized_model(const model::Transformer& model, const FormatAssignment& formats,
                            const std::string& tokenizer_json, const std::string& dir);

// Whether dir/model.safetensors exists and carries the "ms_quantization" metadata key. Errors
// only when the file exists but its header cannot be read.
Result<bool> is_quantized_model(const std::string& dir);

// The format of each tensor a quantized model directory's metadata names (empty for a model
// that is not quantized). Errors are load_quantized_model's for the metadata.
Result<FormatAssignment> quantized_model_formats(const std::string& dir);

// The formats a quantized model directory's metadata names, by count: "int8 x4, int4-g64 x24"
// (the other weights are f32). Errors are load_quantized_model's for the metadata.
Result<std::string> describe_quantized_model(const std::string& dir);

// How load_quantized_model hands the quantized weights over.
enum class QuantizedValues {
  kServe,        // installed in the serving hook (install_quantized_weights), f32 released
  kDequantized,  // written back into the f32 parameters (full-forward evaluation)
};

// Reads a directory save_quantized_model wrote: config.json, the F32 tensors, the codes and
// scales of each tensor the metadata names, and tokenizer.json. Everything is checked before it
// is used, each refusal naming the file and the tensor: metadata that is not the version-1 JSON,
// an unknown format string, a group size int4 does not take, a shape other than the model's, a
// tensor the metadata names whose codes or scales are absent or have another dtype or shape
// than the format implies, int8 codes of -128 or int4 nibbles of 0 (outside [-7, 7]), scales
// that are not finite, a model tensor neither stored nor quantized, and a stored tensor the
// model has no use for. `keep` releases parameters as load_model's does. Served int8 and int4
// weights multiply `activations`.
Result<LoadedModel> load_quantized_model(
    const std::string& dir, const ParameterFilter& keep = {},
    QuantizedValues values = QuantizedValues::kServe,
    ops::ActivationFormat activations = WeightOptions{}.activations);

}  // namespace ms::infer
