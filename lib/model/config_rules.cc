// The rules a model config must satisfy before anything is allocated (validate_model_config),
// each refusal naming the key and the rule.
#include <string>

#include "model/model_impl.h"

namespace ms::model {

std::string key_value(const char* key, int64_t value) {
  return std::string(key) + " (" + std::to_string(value) + ")";
}

namespace {

using config::ModelConfig;

Status check_positive(const char* key, int64_t value) {
  if (value >= 1) return Status::OK();
  return InvalidArgument(key_value(key, value) + " must be at least 1");
}

Status check_divides(const char* a_key, int64_t a, const char* b_key, int64_t b) {
  if (a % b == 0) return Status::OK();
  return InvalidArgument(key_value(a_key, a) + " must be divisible by " + key_value(b_key, b));
}

Status validate_sizes(const ModelConfig& c) {
  MS_RETURN_IF_ERROR(check_positive("model.vocab_size", c.vocab_size));
  MS_RETURN_IF_ERROR(check_positive("model.d_model", c.d_model));
  MS_RETURN_IF_ERROR(check_positive("model.n_layers", c.n_layers));
  MS_RETURN_IF_ERROR(check_positive("model.n_heads", c.n_heads));
  MS_RETURN_IF_ERROR(check_positive("model.n_kv_heads", c.n_kv_heads));
  MS_RETURN_IF_ERROR(check_positive("model.d_ff", c.d_ff));
  MS_RETURN_IF_ERROR(check_positive("model.max_seq_len", c.max_seq_len));
  if (!(c.rope_theta > 0)) return InvalidArgument("model.rope_theta must be positive");
  if (!(c.norm_eps > 0)) return InvalidArgument("model.norm_eps must be positive");
  if (c.sliding_window < 0) {
    return InvalidArgument(key_value("model.sliding_window", c.sliding_window) +
                           " must be 0 (full causal attention) or a positive window");
  }
  return Status::OK();
}

Status validate_moe(const config::MoeConfig& m) {
  if (m.num_experts < 0) {
    return InvalidArgument(key_value("model.moe.num_experts", m.num_experts) +
                           " must be 0 (dense) or positive");
  }
  if (m.shared_expert_d_ff < 0) {
    return InvalidArgument(key_value("model.moe.shared_expert_d_ff", m.shared_expert_d_ff) +
                           " must be 0 (no shared expert) or positive");
  }
  if (m.num_experts == 0) {
    if (m.shared_expert_d_ff == 0) return Status::OK();
    return InvalidArgument("model.moe.shared_expert_d_ff needs MoE layers; set "
                           "model.moe.num_experts or model.moe.shared_expert_d_ff=0");
  }
  if (m.top_k < 1 || m.top_k > m.num_experts) {
    return InvalidArgument(key_value("model.moe.top_k", m.top_k) + " must be between 1 and " +
                           key_value("model.moe.num_experts", m.num_experts));
  }
  if (!(m.aux_loss_coef >= 0)) return InvalidArgument("model.moe.aux_loss_coef must be >= 0");
  return Status::OK();
}

}  // namespace

Status validate_model_config(const ModelConfig& c) {
  MS_RETURN_IF_ERROR(validate_sizes(c));
  MS_RETURN_IF_ERROR(check_divides("model.d_model", c.d_model, "model.n_heads", c.n_heads));
  MS_RETURN_IF_ERROR(check_divides("model.n_heads", c.n_heads, "model.n_kv_heads", c.n_kv_heads));
  if ((c.d_model / c.n_heads) % 2 != 0) {
    return InvalidArgument("head size model.d_model / model.n_heads = " +
                           std::to_string(c.d_model / c.n_heads) +
                           " must be even for rotary embeddings");
  }
  return validate_moe(c.moe);
}

}  // namespace ms::model
