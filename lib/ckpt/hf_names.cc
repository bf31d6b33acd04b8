// Hugging Face names and config.json for model exchange (see hf_names.h and docs/ckpt-cli.md).
#include "ckpt/hf_names.h"

#include <algorithm>

#include "core/checked_math.h"

namespace ms::ckpt {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

void add(std::vector<TensorInfo>& out, std::string name, std::vector<int64_t> shape) {
  out.push_back(TensorInfo{std::move(name), DType::kF32, std::move(shape)});
}

// gate/up are (f, d), down is (d, f).
void add_mlp(std::vector<TensorInfo>& out, const std::string& prefix, const char* gate,
             const char* up, const char* down, int64_t d, int64_t f) {
  add(out, prefix + gate + ".weight", {f, d});
  add(out, prefix + up + ".weight", {f, d});
  add(out, prefix + down + ".weight", {d, f});
}

void add_layer(std::vector<TensorInfo>& out, const config::ModelConfig& c, int64_t layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const int64_t d = c.d_model, hd = c.d_model / c.n_heads;
  add(out, p + "input_layernorm.weight", {d});
  add(out, p + "self_attn.q_proj.weight", {c.n_heads * hd, d});
  add(out, p + "self_attn.k_proj.weight", {c.n_kv_heads * hd, d});
  add(out, p + "self_attn.v_proj.weight", {c.n_kv_heads * hd, d});
  add(out, p + "self_attn.o_proj.weight", {d, c.n_heads * hd});
  if (!c.parallel_block) add(out, p + "post_attention_layernorm.weight", {d});
  if (c.moe.num_experts == 0) {
    add_mlp(out, p + "mlp.", "gate_proj", "up_proj", "down_proj", d, c.d_ff);
    return;
  }
  add(out, p + "block_sparse_moe.gate.weight", {c.moe.num_experts, d});
  if (c.moe.expert_bias) {
    add(out, p + "block_sparse_moe.gate.e_score_correction_bias", {c.moe.num_experts});
  }
  for (int64_t e = 0; e < c.moe.num_experts; ++e) {
    add_mlp(out, p + "block_sparse_moe.experts." + std::to_string(e) + ".", "w1", "w3", "w2", d,
            c.d_ff);
  }
  if (c.moe.shared_expert_d_ff > 0) {
    add_mlp(out, p + "mlp.shared_expert.", "gate_proj", "up_proj", "down_proj", d,
            c.moe.shared_expert_d_ff);
  }
}

// The value of `key` as T, or InvalidArgument naming the file and key.
template <typename T>
Result<T> get_key(const json& doc, const std::string& key, const std::string& source) {
  if (!doc.contains(key) || doc[key].is_null()) {
    return InvalidArgument(source + ": missing key \"" + key + "\"");
  }
  const json& v = doc[key];
  const bool fits = std::is_same_v<T, bool>       ? v.is_boolean()
                    : std::is_integral_v<T>       ? v.is_number_integer()
                    : std::is_floating_point_v<T> ? v.is_number()
                                                  : v.is_string();
  if (!fits) return InvalidArgument(source + ": key \"" + key + "\" has the wrong type: " + v.dump());
  return v.get<T>();
}

template <typename T>
Result<T> get_key_or(const json& doc, const std::string& key, T fallback,
                     const std::string& source) {
  if (!doc.contains(key) || doc[key].is_null()) return fallback;
  return get_key<T>(doc, key, source);
}

}  // namespace

Status check_hf_features(const json& doc, const std::string& source,
                         bool allow_sliding_window) {
  MS_ASSIGN_OR_RETURN(std::string act, get_key_or<std::string>(doc, "hidden_act", "silu", source));
  if (act != "silu") {
    return InvalidArgument(source + ": hidden_act '" + act + "' is not supported (only silu)");
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    MS_ASSIGN_OR_RETURN(bool bias, get_key_or<bool>(doc, key, false, source));
    if (bias) return InvalidArgument(source + ": " + key + "=true is not supported (no biases)");
  }
  if (doc.contains("rope_scaling") && !doc["rope_scaling"].is_null()) {
    return InvalidArgument(source + ": rope_scaling " + doc["rope_scaling"].dump() +
                           " is not supported (plain rotary embeddings only)");
  }
  if (!allow_sliding_window && doc.contains("sliding_window") &&
      !doc["sliding_window"].is_null()) {
    return InvalidArgument(source + ": sliding_window " + doc["sliding_window"].dump() +
                           " is not supported by import (its window boundary differs between "
                           "Hugging Face versions); set it to null for full attention");
  }
  return Status::OK();
}

namespace {

Status read_moe_keys(const json& doc, const std::string& source, config::ModelConfig& c) {
  MS_ASSIGN_OR_RETURN(c.moe.num_experts, get_key<int64_t>(doc, "num_local_experts", source));
  MS_ASSIGN_OR_RETURN(c.moe.top_k, get_key_or<int64_t>(doc, "num_experts_per_tok", 2, source));
  MS_ASSIGN_OR_RETURN(c.moe.aux_loss_coef,
                      get_key_or<double>(doc, "router_aux_loss_coef", c.moe.aux_loss_coef, source));
  MS_ASSIGN_OR_RETURN(c.moe.shared_expert_d_ff,
                      get_key_or<int64_t>(doc, "shared_expert_intermediate_size", 0, source));
  MS_ASSIGN_OR_RETURN(c.moe.expert_bias, get_key_or<bool>(doc, "ms_expert_bias", false, source));
  return Status::OK();
}

}  // namespace

Result<Tensor> allocate_tensor(DType dtype, std::vector<int64_t> shape, const std::string& what) {
  Result<Buffer> buffer = Buffer::allocate(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  if (!buffer.ok()) return buffer.status().with_context(what);
  return Tensor::from_buffer(dtype, std::move(shape), std::move(*buffer));
}

const TensorInfo* TensorCatalog::find(const std::string& name) const {
  auto it = std::find_if(tensors.begin(), tensors.end(),
                         [&](const TensorInfo& t) { return t.name == name; });
  return it == tensors.end() ? nullptr : &*it;
}

std::vector<TensorInfo> hf_parameter_specs(const config::ModelConfig& c) {
  std::vector<TensorInfo> out;
  add(out, "model.embed_tokens.weight", {c.vocab_size, c.d_model});
  for (int64_t l = 0; l < c.n_layers; ++l) add_layer(out, c, l);
  add(out, "model.norm.weight", {c.d_model});
  if (!c.tie_embeddings) add(out, "lm_head.weight", {c.vocab_size, c.d_model});
  return out;
}

Status check_hf_exportable(const config::ModelConfig& c) {
  if (c.parallel_block) {
    return InvalidArgument(
        "model.parallel_block=true has no Hugging Face equivalent (Llama and Mixtral run "
        "attention and the feed-forward one after the other); this checkpoint cannot be exported");
  }
  if (c.sliding_window > 0) {
    return InvalidArgument("model.sliding_window=" + std::to_string(c.sliding_window) +
                           " has no exact Hugging Face Llama/Mixtral equivalent (the window "
                           "boundary of Hugging Face's Mistral differs between versions); this "
                           "checkpoint cannot be exported");
  }
  return Status::OK();
}

nlohmann::ordered_json hf_config_json(const config::ModelConfig& c, bool toolkit_keys) {
  const bool moe = c.moe.num_experts > 0;
  ordered_json j;
  j["architectures"] = {moe ? "MixtralForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = moe ? "mixtral" : "llama";
  j["hidden_size"] = c.d_model;
  j["intermediate_size"] = c.d_ff;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.d_model / c.n_heads;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = c.norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["torch_dtype"] = "float32";
  if (moe) {
    j["num_local_experts"] = c.moe.num_experts;
    j["num_experts_per_tok"] = c.moe.top_k;
    j["router_aux_loss_coef"] = c.moe.aux_loss_coef;
    j["sliding_window"] = nullptr;
    if (c.moe.shared_expert_d_ff > 0) {
      j["shared_expert_intermediate_size"] = c.moe.shared_expert_d_ff;
    }
  }
  if (toolkit_keys && c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (toolkit_keys && c.parallel_block) j["ms_parallel_block"] = true;
  // The routing bias of auxiliary-loss-free balancing (the tensor DeepSeek-V3 names
  // e_score_correction_bias), which Mixtral's config cannot say.
  if (toolkit_keys && moe && c.moe.expert_bias) j["ms_expert_bias"] = true;
  return j;
}

namespace {

// "LlamaForCausalLM" and the like from `architectures`, or from `model_type` when a file has
// only that; the text shown in the refusal otherwise.
std::string architecture_of(const json& doc) {
  const json archs = doc.contains("architectures") ? doc["architectures"] : json();
  if (archs.is_array() && archs.size() == 1 && archs[0].is_string()) return archs[0].get<std::string>();
  if (archs.is_null() && doc.contains("model_type") && doc["model_type"].is_string()) {
    const std::string type = doc["model_type"].get<std::string>();
    if (type == "llama") return "LlamaForCausalLM";
    if (type == "mistral") return "MistralForCausalLM";
    if (type == "mixtral") return "MixtralForCausalLM";
    return "model_type '" + type + "'";
  }
  return archs.dump();
}

// Keys Hugging Face has no equivalent of, which the toolkit's own writers add (a served model
// need not be exportable).
Status read_toolkit_keys(const json& doc, const std::string& source, bool allow_sliding_window,
                         config::ModelConfig& c) {
  MS_ASSIGN_OR_RETURN(c.parallel_block, get_key_or<bool>(doc, "ms_parallel_block", false, source));
  if (allow_sliding_window) {
    MS_ASSIGN_OR_RETURN(c.sliding_window, get_key_or<int64_t>(doc, "sliding_window", 0, source));
  }
  return Status::OK();
}

Status check_positive(const char* key, int64_t value, const std::string& source) {
  if (value >= 1 && value <= kMaxConfigSize) return Status::OK();
  return InvalidArgument(source + ": " + key + " = " + std::to_string(value) + " must be between 1 and " +
                         std::to_string(kMaxConfigSize));
}

}  // namespace

Status check_hf_sizes(const config::ModelConfig& c, const std::string& source) {
  MS_RETURN_IF_ERROR(check_positive("vocab_size", c.vocab_size, source));
  MS_RETURN_IF_ERROR(check_positive("hidden_size", c.d_model, source));
  MS_RETURN_IF_ERROR(check_positive("num_hidden_layers", c.n_layers, source));
  MS_RETURN_IF_ERROR(check_positive("num_attention_heads", c.n_heads, source));
  MS_RETURN_IF_ERROR(check_positive("num_key_value_heads", c.n_kv_heads, source));
  MS_RETURN_IF_ERROR(check_positive("intermediate_size", c.d_ff, source));
  MS_RETURN_IF_ERROR(check_positive("max_position_embeddings", c.max_seq_len, source));
  if (c.d_model % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0) {
    return InvalidArgument(source + ": hidden_size " + std::to_string(c.d_model) +
                           " must be divisible by num_attention_heads " + std::to_string(c.n_heads) +
                           ", and that by num_key_value_heads " + std::to_string(c.n_kv_heads));
  }
  if (c.sliding_window < 0) {
    return InvalidArgument(source + ": sliding_window " + std::to_string(c.sliding_window) +
                           " must be null, 0 or positive");
  }
  const config::MoeConfig& m = c.moe;
  if (m.num_experts < 0 || m.num_experts > kMaxConfigSize || m.shared_expert_d_ff < 0 ||
      m.shared_expert_d_ff > kMaxConfigSize) {
    return InvalidArgument(source + ": num_local_experts " + std::to_string(m.num_experts) +
                           " and shared_expert_intermediate_size " +
                           std::to_string(m.shared_expert_d_ff) + " must be between 0 and " +
                           std::to_string(kMaxConfigSize));
  }
  if (m.num_experts > 0 && (m.top_k < 1 || m.top_k > m.num_experts)) {
    return InvalidArgument(source + ": num_experts_per_tok " + std::to_string(m.top_k) +
                           " must be between 1 and num_local_experts " +
                           std::to_string(m.num_experts));
  }
  return Status::OK();
}

Result<int64_t> hf_parameter_count(const config::ModelConfig& c) {
  // Per layer: input norm, q/k/v/o, the post-attention norm unless parallel, then the FFN:
  // gate/up/down, or the router plus three per expert plus three for a shared expert.
  int64_t per_layer = 5 + (c.parallel_block ? 0 : 1);
  if (c.moe.num_experts == 0) {
    per_layer += 3;
  } else {
    MS_ASSIGN_OR_RETURN(const int64_t experts, checked_mul(c.moe.num_experts, 3, "num_local_experts"));
    MS_ASSIGN_OR_RETURN(per_layer, checked_add(per_layer, experts + 1 + (c.moe.expert_bias ? 1 : 0) +
                                                               (c.moe.shared_expert_d_ff > 0 ? 3 : 0),
                                               "tensors per layer"));
  }
  MS_ASSIGN_OR_RETURN(const int64_t layers, checked_mul(c.n_layers, per_layer, "num_hidden_layers"));
  return checked_add(layers, c.tie_embeddings ? 2 : 3, "tensor count");
}

Status check_hf_weights_fit(const config::ModelConfig& c, const std::string& source,
                            size_t tensors_present, const std::string& weights) {
  MS_RETURN_IF_ERROR(check_hf_sizes(c, source));
  MS_ASSIGN_OR_RETURN(const int64_t implied, hf_parameter_count(c));
  // Up to twice what is present (plus a little) passes, so a few missing tensors are then
  // named one by one by the shape comparison; far more cannot be a near miss, and listing
  // them would cost memory no file backs.
  const int64_t present = static_cast<int64_t>(tensors_present);
  if (implied > 2 * present + 16) {
    return InvalidArgument(source + " implies " + std::to_string(implied) + " tensors (" +
                           std::to_string(c.n_layers) + " layers), but only " +
                           std::to_string(tensors_present) + " are in " + weights +
                           ": the config does not describe these weights");
  }
  return Status::OK();
}

Result<config::ModelConfig> model_config_from_hf_json(const json& doc, const std::string& source,
                                                      bool allow_sliding_window) {
  if (!doc.is_object()) return InvalidArgument(source + ": not a JSON object");
  const std::string arch = architecture_of(doc);
  if (arch != "LlamaForCausalLM" && arch != "MistralForCausalLM" && arch != "MixtralForCausalLM") {
    return InvalidArgument(source + ": architecture " + arch + " is not supported (expected "
                           "LlamaForCausalLM, MistralForCausalLM or MixtralForCausalLM)");
  }
  MS_RETURN_IF_ERROR(check_hf_features(doc, source, allow_sliding_window));
  config::ModelConfig c;
  MS_ASSIGN_OR_RETURN(c.vocab_size, get_key<int64_t>(doc, "vocab_size", source));
  MS_ASSIGN_OR_RETURN(c.d_model, get_key<int64_t>(doc, "hidden_size", source));
  MS_ASSIGN_OR_RETURN(c.n_layers, get_key<int64_t>(doc, "num_hidden_layers", source));
  MS_ASSIGN_OR_RETURN(c.n_heads, get_key<int64_t>(doc, "num_attention_heads", source));
  MS_ASSIGN_OR_RETURN(c.n_kv_heads,
                      get_key_or<int64_t>(doc, "num_key_value_heads", c.n_heads, source));
  MS_ASSIGN_OR_RETURN(c.d_ff, get_key<int64_t>(doc, "intermediate_size", source));
  MS_ASSIGN_OR_RETURN(c.max_seq_len, get_key<int64_t>(doc, "max_position_embeddings", source));
  MS_ASSIGN_OR_RETURN(c.rope_theta, get_key_or<double>(doc, "rope_theta", 10000.0, source));
  MS_ASSIGN_OR_RETURN(c.norm_eps, get_key_or<double>(doc, "rms_norm_eps", 1e-6, source));
  MS_ASSIGN_OR_RETURN(c.tie_embeddings,
                      get_key_or<bool>(doc, "tie_word_embeddings", false, source));
  MS_RETURN_IF_ERROR(read_toolkit_keys(doc, source, allow_sliding_window, c));
  c.moe = config::MoeConfig{};
  c.moe.num_experts = 0;
  if (arch == "MixtralForCausalLM") MS_RETURN_IF_ERROR(read_moe_keys(doc, source, c));
  MS_RETURN_IF_ERROR(check_hf_sizes(c, source));
  if (doc.contains("head_dim") && !doc["head_dim"].is_null()) {
    MS_ASSIGN_OR_RETURN(int64_t head_dim, get_key<int64_t>(doc, "head_dim", source));
    if (head_dim != c.d_model / c.n_heads) {
      return InvalidArgument(source + ": head_dim " + std::to_string(head_dim) +
                             " is not hidden_size / num_attention_heads, which the model needs");
    }
  }
  return c;
}

}  // namespace ms::ckpt
