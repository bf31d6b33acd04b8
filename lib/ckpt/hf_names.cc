// Hugging Face names and config.json for model exchange (see hf_names.h and docs/ckpt-cli.md).
#include "ckpt/hf_names.h"

#include <algorithm>

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
    return InvalidArgument(source + ": missing key '" + key + "'");
  }
  const json& v = doc[key];
  const bool fits = std::is_same_v<T, bool>       ? v.is_boolean()
                    : std::is_integral_v<T>       ? v.is_number_integer()
                    : std::is_floating_point_v<T> ? v.is_number()
                                                  : v.is_string();
  if (!fits) return InvalidArgument(source + ": key '" + key + "' has the wrong type: " + v.dump());
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
  MS_ASSIGN_OR_RETURN(c.moe.top_k, get_key<int64_t>(doc, "num_experts_per_tok", source));
  MS_ASSIGN_OR_RETURN(c.moe.aux_loss_coef,
                      get_key_or<double>(doc, "router_aux_loss_coef", c.moe.aux_loss_coef, source));
  MS_ASSIGN_OR_RETURN(c.moe.shared_expert_d_ff,
                      get_key_or<int64_t>(doc, "shared_expert_intermediate_size", 0, source));
  return Status::OK();
}

}  // namespace

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

nlohmann::ordered_json hf_config_json(const config::ModelConfig& c) {
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
  return j;
}

Result<config::ModelConfig> model_config_from_hf_json(const json& doc,
                                                      const std::string& source) {
  if (!doc.is_object()) return InvalidArgument(source + ": not a JSON object");
  const json archs = doc.contains("architectures") ? doc["architectures"] : json();
  const std::string arch = archs.is_array() && archs.size() == 1 && archs[0].is_string()
                               ? archs[0].get<std::string>() : archs.dump();
  if (arch != "LlamaForCausalLM" && arch != "MistralForCausalLM" && arch != "MixtralForCausalLM") {
    return InvalidArgument(source + ": architecture " + arch + " is not supported (expected "
                           "LlamaForCausalLM, MistralForCausalLM or MixtralForCausalLM)");
  }
  MS_RETURN_IF_ERROR(check_hf_features(doc, source));
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
  if (c.n_heads > 0 && doc.contains("head_dim") && !doc["head_dim"].is_null()) {
    MS_ASSIGN_OR_RETURN(int64_t head_dim, get_key<int64_t>(doc, "head_dim", source));
    if (head_dim * c.n_heads != c.d_model) {
      return InvalidArgument(source + ": head_dim " + std::to_string(head_dim) +
                             " is not hidden_size / num_attention_heads, which the model needs");
    }
  }
  c.moe = config::MoeConfig{};
  c.moe.num_experts = 0;
  if (arch == "MixtralForCausalLM") MS_RETURN_IF_ERROR(read_moe_keys(doc, source, c));
  return c;
}

}  // namespace ms::ckpt
