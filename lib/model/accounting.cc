// Parameter, FLOP and activation accounting, in one place for the trainer's start-up line, the
// MFU figure and the planner (ms-train plan), which never allocates the model.
#include <algorithm>
#include <cstdint>

#include "model/model_impl.h"

namespace ms::model {

using config::ModelConfig;

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

double training_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const double attention = 12.0 * static_cast<double>(c.n_layers * c.d_model) *
                           mean_visible_keys(seq_len, c.sliding_window);
  return 6.0 * static_cast<double>(active_matmul_params(c)) + attention;
}

double Transformer::flops_per_token(int64_t seq_len) const {
  return training_flops_per_token(impl_->cfg, seq_len);
}


// Counted in floats from the buffer shapes of model_impl.h: per layer what the forward keeps
// (the input always; the rest unless recomputed), one working slot for recomputed layers, the
// scratch buffers a layer's backward has in use at once, and the output layer's.
int64_t activation_bytes_of(const ModelConfig& c, const ActivationDims& d, int64_t B, int64_t T) {
  const bool sp = d.tp > 1 && d.sequence_parallel;
  const int64_t N = B * T, Nr = sp ? N / d.tp : N, D = c.d_model;
  const int64_t hd = c.d_model / c.n_heads, qkv = (2 * d.heads + 2 * d.kv_heads) * hd;
  const int64_t E = c.moe.num_experts, k = c.moe.top_k;
  const int64_t attn = N * qkv + B * d.heads * T;
  int64_t ffn = 2 * N * d.d_ff, ffn_scratch = 4 * N * d.d_ff;
  if (E > 0) {
    ffn = N * E + N * k + 2 * N * k * d.d_ff + N * k * D + 2 * N * d.shared_d_ff;
    ffn_scratch = 4 * N * k * d.d_ff + 3 * N * k * D + 2 * N * E;
  }
  const int64_t rest = Nr + (c.parallel_block ? 0 : Nr * D + Nr) + ffn;
  const bool full = d.recompute == config::Recompute::kFull;
  const bool none = d.recompute == config::Recompute::kNone;
  const int64_t kept = Nr * D + (full ? 0 : rest) + (none ? attn : 0);
  const int64_t working = (full ? rest : 0) + (none ? 0 : attn);
  const int64_t gathered = sp ? 2 * N * D : 0;
  const int64_t partial = d.tp > 1 ? 2 * N * D : 0;
  const int64_t scratch = 2 * Nr * D + N * D + gathered + partial + ffn_scratch + N * qkv;
  const int64_t output = N * d.vocab_rows + 2 * Nr * D + (sp ? N * D : 0) + N;
  return static_cast<int64_t>(sizeof(float)) *
         (d.layers * kept + working + scratch + (d.last_chunk ? output : 0));
}

int64_t Transformer::activation_bytes(int64_t B, int64_t T) const {
  const Impl& m = *impl_;
  const TpState& tp = m.tp;
  const ActivationDims dims{.tp = tp.size,
                            .sequence_parallel = tp.sequence_parallel,
                            .heads = tp.heads,
                            .kv_heads = tp.kv_heads,
                            .d_ff = tp.d_ff,
                            .shared_d_ff = tp.shared_d_ff,
                            .vocab_rows = tp.vocab_rows,
                            .recompute = m.recompute,
                            .layers = static_cast<int64_t>(m.layers.size()),
                            .last_chunk = m.chunk.last};
  return activation_bytes_of(m.cfg, dims, B, T);
}

}  // namespace ms::model
