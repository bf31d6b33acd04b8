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

// An owning tensor of `dtype` and `shape` (a size the caller has already checked against a
// file), or Unavailable naming `what` when memory runs out, so readers report which tensor
// did not fit instead of an exception without context.
Result<Tensor> allocate_tensor(DType dtype, std::vector<int64_t> shape, const std::string& what);

// The parameters of a model with `config`, in the Transformer's order (embedding; per layer
// norms, attention, FFN; final norm; lm_head unless tied), as f32 with their global shapes.
// Linear weights are (out_features, in_features) as in PyTorch.
std::vector<TensorInfo> hf_parameter_specs(const config::ModelConfig& config);

// OK when a model with `config` has an exact Hugging Face equivalent; otherwise InvalidArgument
// naming the key (model.parallel_block, model.sliding_window) and why it cannot be exported.
Status check_hf_exportable(const config::ModelConfig& config);

// config.json in Hugging Face's schema: LlamaForCausalLM for dense models, MixtralForCausalLM
// for MoE (with shared_expert_intermediate_size, the Qwen2-MoE key, when there is a shared
// expert). The caller checks check_hf_exportable first, unless it asks for `toolkit_keys`:
// then what Hugging Face has no equivalent of is written as the toolkit's own keys
// (sliding_window, ms_parallel_block), which model_config_from_hf_json reads back.
nlohmann::ordered_json hf_config_json(const config::ModelConfig& config,
                                      bool toolkit_keys = false);

// Refuses config.json features the toolkit's model does not have (another activation than silu,
// attention or MLP biases, rope scaling) and, unless allowed, a sliding window (whose boundary
// differs between Hugging Face versions, so import refuses it; the toolkit's own files carry
// its convention). InvalidArgument prefixed by `source`.
Status check_hf_features(const nlohmann::json& doc, const std::string& source,
                         bool allow_sliding_window = false);

// The largest size any config.json key may give (a vocabulary, a width, a layer count): token
// ids are int32 throughout the toolkit, and no real model comes near it in the other keys.
inline constexpr int64_t kMaxConfigSize = (int64_t{1} << 31) - 1;

// The one reader of config.json (ms-ckpt import and ms-infer both use it): a ModelConfig from
// its contents. `source` (the file's path) prefixes every error. InvalidArgument for an
// architecture other than Llama/Mistral/Mixtral (from `architectures`, or `model_type` when
// that is all there is), a missing or mistyped key, a feature the toolkit's model lacks
// (biases, rope scaling, another activation, a head_dim other than hidden_size /
// num_attention_heads, a sliding window unless allowed) and sizes check_hf_sizes refuses.
// Defaults follow Hugging Face's: num_key_value_heads = num_attention_heads, rms_norm_eps 1e-6,
// rope_theta 1e4, num_experts_per_tok 2. The toolkit's own keys (ms_parallel_block, and
// sliding_window when allowed) are read too, so a model written by infer::save_hf_model loads
// back exactly.
Result<config::ModelConfig> model_config_from_hf_json(const nlohmann::json& doc,
                                                      const std::string& source,
                                                      bool allow_sliding_window = false);

// Every size positive and at most kMaxConfigSize, heads dividing hidden_size, KV heads
// dividing heads, 1 <= num_experts_per_tok <= num_local_experts: the checks that make the
// parameter shapes computable without dividing by zero or overflowing. InvalidArgument naming
// `source` and the key.
Status check_hf_sizes(const config::ModelConfig& config, const std::string& source);

// How many tensors hf_parameter_specs(config) lists, computed without building the list (and
// with overflow checks), so a config claiming 10^12 layers is refused before anything is
// allocated for it.
Result<int64_t> hf_parameter_count(const config::ModelConfig& config);

// Call before hf_parameter_specs(config) and before allocating a model for weights that hold
// `tensors_present` tensors: check_hf_sizes, then InvalidArgument naming `source` when the
// config implies far more tensors (over twice as many) than `weights` (the files, named in
// the message) hold; the caller's per-tensor comparison names any smaller mismatch.
Status check_hf_weights_fit(const config::ModelConfig& config, const std::string& source,
                            size_t tensors_present, const std::string& weights);

}  // namespace ms::ckpt
