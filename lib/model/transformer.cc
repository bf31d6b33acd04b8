// Transformer construction (config validation, parameter table, initialization), parameter
// and FLOP counts, and the public forward/backward entry points. The layer math is in
// model/compute.cc.
#include "model/transformer.h"

#include <cmath>
#include <new>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/philox.h"
#include "model/model_impl.h"
#include "ops/cross_entropy.h"

namespace ms::model {
namespace {

using config::ModelConfig;

std::string key_value(const char* key, int64_t value) {
  return std::string(key) + " (" + std::to_string(value) + ")";
}

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

namespace {

enum class Init { kNormal, kOutputProjection, kOnes };

// Adds one replicated parameter initialized from Philox keyed by (seed, name, element index).
size_t add_parameter(std::vector<Parameter>& params, std::string name,
                     std::vector<int64_t> shape, Init init, uint64_t seed, int64_t n_layers) {
  Tensor value = Tensor::empty(DType::kF32, shape);
  if (init == Init::kOnes) {
    value.fill(1.0f);
  } else {
    const double scale = init == Init::kOutputProjection ? 1.0 / std::sqrt(2.0 * n_layers) : 1.0;
    fill_normal(value.span<float>(), seed, stream_id(name), 0, 0.0f,
                static_cast<float>(0.02 * scale));
  }
  Tensor grad = Tensor::zeros(DType::kF32, shape);
  comm::ShardSpec shard = comm::ShardSpec::replicated(shape);
  params.push_back(Parameter{std::move(name), std::move(shape), std::move(shard),
                             std::move(value), std::move(grad), init != Init::kOnes});
  return params.size() - 1;
}

// The parameters of one SwiGLU feed-forward, under `prefix` with the given names.
MlpIndex add_mlp(std::vector<Parameter>& p, const std::string& prefix, const char* gate,
                 const char* up, const char* down, int64_t d, int64_t f, uint64_t seed,
                 int64_t layers) {
  MlpIndex m;
  m.gate = add_parameter(p, prefix + gate + ".weight", {f, d}, Init::kNormal, seed, layers);
  m.up = add_parameter(p, prefix + up + ".weight", {f, d}, Init::kNormal, seed, layers);
  m.down = add_parameter(p, prefix + down + ".weight", {d, f}, Init::kOutputProjection, seed,
                         layers);
  return m;
}

void add_attention(std::vector<Parameter>& p, LayerIndex& li, const std::string& prefix,
                   const ModelConfig& c, uint64_t seed) {
  const int64_t hd = c.d_model / c.n_heads, L = c.n_layers;
  const std::string a = prefix + "self_attn.";
  li.attn_norm = add_parameter(p, prefix + "input_layernorm.weight", {c.d_model}, Init::kOnes,
                               seed, L);
  li.q = add_parameter(p, a + "q_proj.weight", {c.n_heads * hd, c.d_model}, Init::kNormal, seed,
                       L);
  li.k = add_parameter(p, a + "k_proj.weight", {c.n_kv_heads * hd, c.d_model}, Init::kNormal,
                       seed, L);
  li.v = add_parameter(p, a + "v_proj.weight", {c.n_kv_heads * hd, c.d_model}, Init::kNormal,
                       seed, L);
  li.o = add_parameter(p, a + "o_proj.weight", {c.d_model, c.n_heads * hd},
                       Init::kOutputProjection, seed, L);
}

void add_ffn(std::vector<Parameter>& p, LayerIndex& li, const std::string& prefix,
             const ModelConfig& c, uint64_t seed) {
  const int64_t D = c.d_model, L = c.n_layers;
  if (!c.parallel_block) {
    li.ffn_norm = add_parameter(p, prefix + "post_attention_layernorm.weight", {D}, Init::kOnes,
                                seed, L);
  }
  if (c.moe.num_experts == 0) {
    li.mlp = add_mlp(p, prefix + "mlp.", "gate_proj", "up_proj", "down_proj", D, c.d_ff, seed, L);
    return;
  }
  const std::string moe = prefix + "block_sparse_moe.";
  li.router = add_parameter(p, moe + "gate.weight", {c.moe.num_experts, D}, Init::kNormal, seed,
                            L);
  for (int64_t e = 0; e < c.moe.num_experts; ++e) {
    li.experts.push_back(add_mlp(p, moe + "experts." + std::to_string(e) + ".", "w1", "w3", "w2",
                                 D, c.d_ff, seed, L));
  }
  if (c.moe.shared_expert_d_ff > 0) {
    li.shared = add_mlp(p, prefix + "mlp.shared_expert.", "gate_proj", "up_proj", "down_proj", D,
                        c.moe.shared_expert_d_ff, seed, L);
  }
}

void build_parameters(Transformer::Impl& m, uint64_t seed) {
  const ModelConfig& c = m.cfg;
  auto& p = m.params;
  m.embed = add_parameter(p, "model.embed_tokens.weight", {c.vocab_size, c.d_model},
                          Init::kNormal, seed, c.n_layers);
  m.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    m.layers[l].first_param = p.size();
    add_attention(p, m.layers[l], prefix, c, seed);
    add_ffn(p, m.layers[l], prefix, c, seed);
    m.layers[l].end_param = p.size();
  }
  m.final_norm = add_parameter(p, "model.norm.weight", {c.d_model}, Init::kOnes, seed,
                               c.n_layers);
  m.lm_head = c.tie_embeddings ? m.embed
                               : add_parameter(p, "lm_head.weight", {c.vocab_size, c.d_model},
                                               Init::kNormal, seed, c.n_layers);
}

Status validate_tokens(const int32_t* ids, int64_t n, int64_t vocab, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return InvalidArgument(std::string(what) + " token " + std::to_string(ids[i]) +
                             " at flat position " + std::to_string(i) +
                             " is outside the vocabulary [0, " + std::to_string(vocab) +
                             ") of model.vocab_size");
    }
  }
  return Status::OK();
}

}  // namespace

Transformer::Transformer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Transformer::~Transformer() = default;

namespace {

// The sizes come from a config file or a checkpoint; one too large for this machine must say
// which sizes, not escape as std::bad_alloc.
Status cannot_allocate(const ModelConfig& c) {
  return Unavailable("out of memory allocating the model's parameters: model.vocab_size " +
                     std::to_string(c.vocab_size) + ", model.d_model " +
                     std::to_string(c.d_model) + ", model.n_layers " +
                     std::to_string(c.n_layers) + ", model.d_ff " + std::to_string(c.d_ff) +
                     ", model.moe.num_experts " + std::to_string(c.moe.num_experts) +
                     ", model.max_seq_len " + std::to_string(c.max_seq_len) +
                     " need more memory than this process can get; check these sizes");
}

}  // namespace

Result<std::unique_ptr<Transformer>> Transformer::create(const ModelConfig& config,
                                                         uint64_t seed) {
  MS_RETURN_IF_ERROR(validate_model_config(config));
  auto impl = std::make_unique<Impl>();
  impl->cfg = config;
  try {
    build_parameters(*impl, seed);
    impl->rope = ops::make_rope_table(config.max_seq_len, config.d_model / config.n_heads,
                                      config.rope_theta);
    impl->acts.resize(config.n_layers);
  } catch (const std::bad_alloc&) {
    return cannot_allocate(config);
  } catch (const std::length_error&) {
    return cannot_allocate(config);
  }
  return std::unique_ptr<Transformer>(new Transformer(std::move(impl)));
}

std::vector<Parameter>& Transformer::parameters() { return impl_->params; }
const std::vector<Parameter>& Transformer::parameters() const { return impl_->params; }
const config::ModelConfig& Transformer::config() const { return impl_->cfg; }

Result<size_t> Transformer::parameter_index(const std::string& name) const {
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    if (impl_->params[i].name == name) return i;
  }
  return NotFound("model has no parameter named '" + name + "'");
}

void Transformer::zero_grads() {
  for (Parameter& p : impl_->params) p.grad.fill(0.0f);
}

namespace {

Result<Dims> check_batch(const ModelConfig& c, const int32_t* inputs, const int32_t* targets,
                         int64_t B, int64_t T) {
  if (B < 1) return InvalidArgument("batch size " + std::to_string(B) + " must be at least 1");
  if (T < 1 || T > c.max_seq_len) {
    return InvalidArgument("sequence length " + std::to_string(T) + " must be between 1 and " +
                           key_value("model.max_seq_len", c.max_seq_len));
  }
  MS_RETURN_IF_ERROR(validate_tokens(inputs, B * T, c.vocab_size, "input"));
  if (targets != nullptr) MS_RETURN_IF_ERROR(validate_tokens(targets, B * T, c.vocab_size, "target"));
  return Dims{B, T, B * T};
}

// Mean loss over the tokens, summed in double in token order.
double mean_loss(const std::vector<float>& token_loss, int64_t n) {
  return std::accumulate(token_loss.begin(), token_loss.begin() + n, 0.0) /
         static_cast<double>(n);
}

}  // namespace

Result<LossStats> Transformer::forward_backward(const int32_t* inputs, const int32_t* targets,
                                                int64_t B, int64_t T, float grad_scale,
                                                const BackwardHooks* hooks) {
  MS_ASSIGN_OR_RETURN(const Dims d, check_batch(impl_->cfg, inputs, targets, B, T));
  Impl& m = *impl_;
  const double aux_sum = m.forward(inputs, d);
  m.token_loss.resize(d.N);
  ops::softmax_cross_entropy(m.logits.data(), targets, m.token_loss.data(), d.N,
                             m.cfg.vocab_size, grad_scale / static_cast<float>(d.N), true);
  const double layers = static_cast<double>(m.cfg.n_layers);
  const float aux_grad = static_cast<float>(grad_scale * m.cfg.moe.aux_loss_coef / layers);
  m.backward(inputs, d, aux_grad, hooks);
  return LossStats{mean_loss(m.token_loss, d.N), m.is_moe() ? aux_sum / layers : 0.0, d.N};
}

Result<LossStats> Transformer::forward_loss(const int32_t* inputs, const int32_t* targets,
                                            int64_t B, int64_t T) {
  MS_ASSIGN_OR_RETURN(const Dims d, check_batch(impl_->cfg, inputs, targets, B, T));
  Impl& m = *impl_;
  const double aux_sum = m.forward(inputs, d);
  m.token_loss.resize(d.N);
  ops::softmax_cross_entropy(m.logits.data(), targets, m.token_loss.data(), d.N,
                             m.cfg.vocab_size, 0.0f, false);
  const double layers = static_cast<double>(m.cfg.n_layers);
  return LossStats{mean_loss(m.token_loss, d.N), m.is_moe() ? aux_sum / layers : 0.0, d.N};
}

Result<Tensor> Transformer::forward_logits(const int32_t* inputs, int64_t B, int64_t T) {
  MS_ASSIGN_OR_RETURN(const Dims d, check_batch(impl_->cfg, inputs, nullptr, B, T));
  impl_->forward(inputs, d);
  Tensor out = Tensor::empty(DType::kF32, {B, T, impl_->cfg.vocab_size});
  std::copy(impl_->logits.begin(), impl_->logits.begin() + out.numel(), out.data<float>());
  return out;
}

namespace {

int64_t mlp_params(int64_t d, int64_t f) { return 3 * d * f; }

// Parameters of the matrices one token multiplies with (no embedding gather, no norms).
int64_t active_matmul_params(const ModelConfig& c) {
  const int64_t hd = c.d_model / c.n_heads;
  const int64_t attention = c.d_model * hd * (2 * c.n_heads + 2 * c.n_kv_heads);
  int64_t ffn = mlp_params(c.d_model, c.d_ff);
  if (c.moe.num_experts > 0) {
    ffn = c.moe.top_k * mlp_params(c.d_model, c.d_ff) + c.moe.num_experts * c.d_model +
          mlp_params(c.d_model, c.moe.shared_expert_d_ff);
  }
  return c.n_layers * (attention + ffn) + c.vocab_size * c.d_model;
}

// Mean number of keys a query attends to over positions 0..T-1.
double mean_visible_keys(int64_t T, int64_t window) {
  double sum = 0;
  for (int64_t i = 0; i < T; ++i) sum += static_cast<double>(window == 0 ? i + 1 : std::min(i + 1, window));
  return sum / static_cast<double>(T);
}

}  // namespace

int64_t Transformer::parameter_count() const {
  int64_t total = 0;
  for (const Parameter& p : impl_->params) total += p.shard.global_numel();
  return total;
}

int64_t Transformer::active_parameter_count() const {
  const ModelConfig& c = impl_->cfg;
  const int64_t idle = c.moe.num_experts - (c.moe.num_experts > 0 ? c.moe.top_k : 0);
  return parameter_count() - c.n_layers * idle * mlp_params(c.d_model, c.d_ff);
}

double Transformer::flops_per_token(int64_t seq_len) const {
  const ModelConfig& c = impl_->cfg;
  const double attention = 12.0 * static_cast<double>(c.n_layers * c.d_model) *
                           mean_visible_keys(seq_len, c.sliding_window);
  return 6.0 * static_cast<double>(active_matmul_params(c)) + attention;
}

}  // namespace ms::model
