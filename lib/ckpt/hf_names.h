// The Hugging Face side of model exchange: which tensors a model of a given ModelConfig has
// (the toolkit already names parameters as Hugging Face Llama/Mixtral do, with Qwen2-MoE names
// for a shared expert, so the mapping is the identity and only the list needs deriving), and the
// translation between ModelConfig and Hugging Face's config.json. Kept apart from lib/model so
// ms-ckpt can export and import without building a Transformer, and the rules for what has no
// Hugging Face equivalent live in one place.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"
#include "core/tensor.h"

namespace ms::ckpt {

// A named global tensor without its data.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};

// A set of named tensors that can be read one at a time (a checkpoint, a safetensors directory),
// so tools stream through models larger than memory. `read` returns an owning tensor of the
// listed dtype and shape, or an error naming the file and the tensor.
struct TensorCatalog {
  std::vector<TensorInfo> tensors;
  std::function<Result<Tensor>(const std::string& name)> read;
  const TensorInfo* find(const std::string& name) const;
};

// The parameters of a model with `config`, in the Transformer's order (embedding; per layer
// norms, attention, FFN; final norm; lm_head unless tied), as f32 with their global shapes.
// Linear weights are (out_features, in_features) as in PyTorch.
std::vector<TensorInfo> hf_parameter_specs(const config::ModelConfig& config);

// OK when a model with `config` has an exact Hugging Face equivalent; otherwise InvalidArgument
// naming the key (model.parallel_block, model.sliding_window) and why it cannot be exported.
Status check_hf_exportable(const config::ModelConfig& config);

// config.json in Hugging Face's schema: LlamaForCausalLM for dense models, MixtralForCausalLM
// for MoE (with shared_expert_intermediate_size, the Qwen2-MoE key, when there is a shared
// expert). The caller checks check_hf_exportable first.
nlohmann::ordered_json hf_config_json(const config::ModelConfig& config);

// Refuses config.json features the toolkit's model does not have (another activation than silu,
// attention or MLP biases, rope scaling) and, unless allowed, a sliding window (whose boundary
// differs between Hugging Face versions, so import refuses it; the toolkit's own files carry
// its convention). InvalidArgument prefixed by `source`.
Status check_hf_features(const nlohmann::json& doc, const std::string& source,
                         bool allow_sliding_window = false);

// The reverse: a ModelConfig from config.json's contents. `source` (the file's path) prefixes
// every error. InvalidArgument for an architecture other than Llama/Mistral/Mixtral, a missing
// or mistyped key, or a feature the toolkit's model lacks (biases, rope scaling, another
// activation, a head_dim other than hidden_size / num_attention_heads, a sliding window).
Result<config::ModelConfig> model_config_from_hf_json(const nlohmann::json& doc,
                                                      const std::string& source);

}  // namespace ms::ckpt
