// Transformer construction (config validation, parameter table, initialization), parameter
// and FLOP counts, and the public forward/backward entry points. The layer math is in
// model/compute.cc.
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/philox.h"
#include "model/model_impl.h"
#include "ops/cross_entropy.h"
#include "ops/linear.h"
#include "parallel/tp_shards.h"
#include "parallel/vocab_parallel.h"

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

// kZeros: a routing bias (model.moe.expert_bias), the one tensor the optimizer does not train.
enum class Init { kNormal, kOutputProjection, kOnes, kZeros };

// Fills `value`, the slice `shard` of a global tensor, with the global tensor's values there:
// Philox keyed by (seed, name, global element index), so every layout initializes the same
// model. A box is filled one contiguous run of its last dimension at a time.
void fill_shard(Tensor& value, const comm::ShardSpec& shard, uint64_t seed, uint64_t stream,
                float std) {
  std::span<float> out = value.span<float>();
  const std::vector<int64_t>& global = shard.global_shape();
  if (global.size() != 2 || shard.is_replicated()) {
    fill_normal(out, seed, stream, 0, 0.0f, std);
    return;
  }
  const int64_t rows = shard.lengths()[0], cols = shard.lengths()[1];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t first = (shard.offsets()[0] + r) * global[1] + shard.offsets()[1];
    fill_normal(out.subspan(static_cast<size_t>(r * cols), static_cast<size_t>(cols)), seed,
                stream, static_cast<uint64_t>(first), 0.0f, std);
  }
}

// Adds one parameter, this tp rank's slice of it (parallel/tp_shards.h), initialized from
// Philox keyed by (seed, name, global element index).
Result<size_t> add_parameter(std::vector<Parameter>& params, std::string name,
                             std::vector<int64_t> shape, Init init, uint64_t seed,
                             int64_t n_layers, int tp, int tp_rank, ParameterValues values) {
  MS_ASSIGN_OR_RETURN(comm::ShardSpec shard, parallel::tp_shard(name, shape, tp, tp_rank));
  Tensor value = Tensor::empty(DType::kF32, shard.lengths());
  if (init == Init::kOnes || init == Init::kZeros) {
    value.fill(init == Init::kOnes ? 1.0f : 0.0f);
  } else if (values == ParameterValues::kRandom) {
    const double scale = init == Init::kOutputProjection ? 1.0 / std::sqrt(2.0 * n_layers) : 1.0;
    fill_shard(value, shard, seed, stream_id(name), static_cast<float>(0.02 * scale));
  }
  Tensor grad = values == ParameterValues::kRandom ? Tensor::zeros(DType::kF32, shard.lengths())
                                                   : Tensor();
  const bool plain = init != Init::kOnes && init != Init::kZeros;
  params.push_back(Parameter{std::move(name), std::move(shape), std::move(shard),
                             std::move(value), std::move(grad), plain, init != Init::kZeros});
  return params.size() - 1;
}

// The parameter table under construction: where the parameters go and the layout they are
// sliced for.
struct Builder {
  std::vector<Parameter>& params;
  uint64_t seed = 0;
  ParameterValues values = ParameterValues::kRandom;
  int64_t n_layers = 1;
  int tp = 1, tp_rank = 0;
  int64_t first_expert = 0, local_experts = -1;  // -1: every expert
  bool whole_experts = false;  // parallel.expert_tp false: experts not split over tp
  Status status;
  std::vector<ParameterSpec>* specs = nullptr;  // set: list names and shapes, allocate nothing

  // Adds a parameter (see add_parameter); after a failure, adds nothing and returns kNoParam.
  size_t add(std::string name, std::vector<int64_t> shape, Init init, bool whole = false) {
    if (specs != nullptr) {
      specs->push_back({std::move(name), std::move(shape), init == Init::kOnes,
                        init != Init::kZeros});
      return specs->size() - 1;
    }
    if (!status.ok()) return kNoParam;
    Result<size_t> index = add_parameter(params, std::move(name), std::move(shape), init, seed,
                                         n_layers, whole ? 1 : tp, whole ? 0 : tp_rank, values);
    if (!index.ok()) {
      status = index.status();
      return kNoParam;
    }
    return *index;
  }
};

// The parameters of one SwiGLU feed-forward, under `prefix` with the given names.
// whole: not split over tp (routed experts under parallel.expert_tp false).
MlpIndex add_mlp(Builder& b, const std::string& prefix, const char* gate, const char* up,
                 const char* down, int64_t d, int64_t f, bool whole = false) {
  MlpIndex m;
  m.gate = b.add(prefix + gate + ".weight", {f, d}, Init::kNormal, whole);
  m.up = b.add(prefix + up + ".weight", {f, d}, Init::kNormal, whole);
  m.down = b.add(prefix + down + ".weight", {d, f}, Init::kOutputProjection, whole);
  return m;
}

void add_attention(Builder& b, LayerIndex& li, const std::string& prefix, const ModelConfig& c) {
  const int64_t hd = c.d_model / c.n_heads;
  const std::string a = prefix + "self_attn.";
  li.attn_norm = b.add(prefix + "input_layernorm.weight", {c.d_model}, Init::kOnes);
  li.q = b.add(a + "q_proj.weight", {c.n_heads * hd, c.d_model}, Init::kNormal);
  li.k = b.add(a + "k_proj.weight", {c.n_kv_heads * hd, c.d_model}, Init::kNormal);
  li.v = b.add(a + "v_proj.weight", {c.n_kv_heads * hd, c.d_model}, Init::kNormal);
  li.o = b.add(a + "o_proj.weight", {c.d_model, c.n_heads * hd}, Init::kOutputProjection);
}

void add_ffn(Builder& b, LayerIndex& li, const std::string& prefix, const ModelConfig& c) {
  const int64_t D = c.d_model;
  if (!c.parallel_block) {
    li.ffn_norm = b.add(prefix + "post_attention_layernorm.weight", {D}, Init::kOnes);
  }
  if (c.moe.num_experts == 0) {
    li.mlp = add_mlp(b, prefix + "mlp.", "gate_proj", "up_proj", "down_proj", D, c.d_ff);
    return;
  }
  const std::string moe = prefix + "block_sparse_moe.";
  li.router = b.add(moe + "gate.weight", {c.moe.num_experts, D}, Init::kNormal);
  if (c.moe.expert_bias) {
    li.expert_bias = b.add(moe + "gate.e_score_correction_bias", {c.moe.num_experts}, Init::kZeros);
  }
  const int64_t first = b.first_expert;
  const int64_t count = b.local_experts < 0 ? c.moe.num_experts : b.local_experts;
  for (int64_t e = first; e < first + count; ++e) {
    li.experts.push_back(
        add_mlp(b, moe + "experts." + std::to_string(e) + ".", "w1", "w3", "w2", D, c.d_ff,
                b.whole_experts));
  }
  if (c.moe.shared_expert_d_ff > 0) {
    li.shared = add_mlp(b, prefix + "mlp.shared_expert.", "gate_proj", "up_proj", "down_proj", D,
                        c.moe.shared_expert_d_ff);
  }
}

Status build_parameters(Transformer::Impl& m, uint64_t seed, ParameterValues values,
                        std::vector<ParameterSpec>* specs = nullptr) {
  const ModelConfig& c = m.cfg;
  Builder b{m.params, seed, values, c.n_layers, m.tp.size, m.tp.rank, 0, -1, false,
            Status::OK(), specs};
  if (specs == nullptr && m.is_moe()) {
    b.first_expert = m.ep.first_expert;
    b.local_experts = m.ep.local_experts;
    b.whole_experts = m.tp.expert_tokens_split;
  }
  const PipelineChunk& chunk = m.chunk;
  if (chunk.first) {
    m.embed = b.add("model.embed_tokens.weight", {c.vocab_size, c.d_model}, Init::kNormal);
  }
  m.layers.resize(static_cast<size_t>(chunk.layers));
  for (int64_t i = 0; i < chunk.layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(chunk.first_layer + i) + ".";
    LayerIndex& li = m.layers[static_cast<size_t>(i)];
    li.first_param = m.params.size();
    add_attention(b, li, prefix, c);
    add_ffn(b, li, prefix, c);
    li.end_param = m.params.size();
  }
  if (!chunk.last) return b.status;
  m.final_norm = b.add("model.norm.weight", {c.d_model}, Init::kOnes);
  if (c.tie_embeddings && chunk.first) {
    m.lm_head = m.embed;
  } else if (c.tie_embeddings) {
    // The last stage's copy of the tied embedding: initialized like the first stage's.
    m.lm_head = b.add("model.embed_tokens.weight", {c.vocab_size, c.d_model}, Init::kNormal);
  } else {
    m.lm_head = b.add("lm_head.weight", {c.vocab_size, c.d_model}, Init::kNormal);
  }
  return b.status;
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

Result<std::vector<ParameterSpec>> parameter_specs(const ModelConfig& config) {
  MS_RETURN_IF_ERROR(validate_model_config(config));
  Transformer::Impl impl;
  impl.cfg = config;
  impl.chunk.layers = config.n_layers;
  std::vector<ParameterSpec> specs;
  MS_RETURN_IF_ERROR(build_parameters(impl, 0, ParameterValues::kRandom, &specs));
  return specs;
}

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

namespace {

// This rank's share of the model under `parallel` (everything without tp).
Result<TpState> tp_state(const ModelConfig& c, const ModelParallel& parallel) {
  TpState tp;
  if (parallel.tp != nullptr && parallel.tp->size() > 1) {
    tp.comm = parallel.tp;
    tp.size = parallel.tp->size();
    tp.rank = parallel.tp->rank();
    tp.sequence_parallel = parallel.sequence_parallel;
  }
  MS_RETURN_IF_ERROR(parallel::check_tp_model(
      {c.n_heads, c.n_kv_heads, c.d_ff, c.moe.shared_expert_d_ff}, tp.size));
  tp.heads = c.n_heads / tp.size;
  tp.kv_heads = c.n_kv_heads / tp.size;
  tp.d_ff = c.d_ff / tp.size;
  tp.shared_d_ff = c.moe.shared_expert_d_ff / tp.size;
  tp.expert_tokens_split = tp.size > 1 && c.moe.num_experts > 0 && !parallel.expert_tp;
  tp.expert_d_ff = tp.expert_tokens_split ? c.d_ff : tp.d_ff;
  MS_ASSIGN_OR_RETURN(tp.vocab, parallel::vocab_shard(c.vocab_size, tp.size, tp.rank));
  tp.vocab_rows = std::max<int64_t>(0, tp.vocab.real_end() - tp.vocab.begin);
  return tp;
}

// This rank's experts under expert parallelism over `ep` (every expert without it).
Result<EpState> ep_state(const ModelConfig& c, comm::Communicator* group) {
  EpState ep;
  ep.local_experts = c.moe.num_experts;
  if (group == nullptr || group->size() == 1) return ep;
  if (c.moe.num_experts == 0 || c.moe.num_experts % group->size() != 0) {
    return InvalidArgument(key_value("model.moe.num_experts", c.moe.num_experts) +
                           " must be a positive multiple of parallel.ep (" +
                           std::to_string(group->size()) + ")");
  }
  ep.comm = group;
  ep.size = group->size();
  ep.rank = group->rank();
  ep.local_experts = c.moe.num_experts / ep.size;
  ep.first_expert = ep.rank * ep.local_experts;
  return ep;
}

// The chunk with its layer count resolved; InvalidArgument for layers outside the model.
Result<PipelineChunk> resolve_chunk(const ModelConfig& c, PipelineChunk chunk) {
  if (chunk.layers < 0) chunk.layers = c.n_layers - chunk.first_layer;
  if (chunk.first_layer < 0 || chunk.layers < 1 || chunk.first_layer + chunk.layers > c.n_layers) {
    return InvalidArgument("a pipeline chunk of layers [" + std::to_string(chunk.first_layer) +
                           ", " + std::to_string(chunk.first_layer + chunk.layers) +
                           ") does not lie within " + key_value("model.n_layers", c.n_layers));
  }
  return chunk;
}

}  // namespace

Result<std::unique_ptr<Transformer>> Transformer::create(const ModelConfig& config,
                                                         uint64_t seed,
                                                         const ModelParallel& parallel,
                                                         ParameterValues values) {
  MS_RETURN_IF_ERROR(validate_model_config(config));
  auto impl = std::make_unique<Impl>();
  impl->cfg = config;
  MS_ASSIGN_OR_RETURN(impl->tp, tp_state(config, parallel));
  MS_ASSIGN_OR_RETURN(impl->chunk, resolve_chunk(config, parallel.chunk));
  MS_ASSIGN_OR_RETURN(impl->ep, ep_state(config, parallel.ep));
  impl->ep.bf16 = impl->ep.active() && parallel.ep_bf16;
  impl->ep.chunks = std::max(parallel.ep_chunks, 1);
  if (parallel.cp != nullptr && parallel.cp->size() > 1) {
    impl->cp.comm = parallel.cp;
    impl->cp.size = parallel.cp->size();
    impl->cp.rank = parallel.cp->rank();
  }
  impl->recompute = parallel.recompute;
  if (parallel.overlap_chunks < 1) {
    return InvalidArgument("parallel.tp_overlap_chunks must be at least 1, got " +
                           std::to_string(parallel.overlap_chunks));
  }
  impl->tp.overlap.chunks = parallel.overlap_chunks;
  impl->tp.overlap.stats = &impl->tp.stats;
  impl->tp.overlap.on_comm = parallel.on_comm;
  try {
    MS_RETURN_IF_ERROR(build_parameters(*impl, seed, values));
    impl->rope = ops::make_rope_table(config.max_seq_len, config.d_model / config.n_heads,
                                      config.rope_theta);
    impl->pass.acts.resize(impl->layers.size());
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

Status Transformer::set_document_mask(const DocumentMask& mask) {
  if (mask.positions && !mask.enabled) {
    return InvalidArgument("train.document_positions restarts positions at each document, "
                           "which needs train.document_mask: true");
  }
  if (mask.enabled && (mask.eod_id < 0 || mask.eod_id >= impl_->cfg.vocab_size)) {
    return InvalidArgument("document masking: the end-of-document id " +
                           std::to_string(mask.eod_id) + " is outside the vocabulary of " +
                           key_value("model.vocab_size", impl_->cfg.vocab_size));
  }
  impl_->documents = mask;
  return Status::OK();
}

const DocumentMask& Transformer::document_mask() const { return impl_->documents; }

void Transformer::zero_grads() {
  for (Parameter& p : impl_->params) p.grad.fill(0.0f);
}

namespace {

Result<Dims> check_batch(const ModelConfig& c, const TpState& tp, const int32_t* inputs,
                         const int32_t* targets, int64_t B, int64_t T) {
  if (B > 0 && T > 0 && B > std::numeric_limits<int64_t>::max() / T) {
    return InvalidArgument("batch size " + std::to_string(B) + " x sequence length " +
                           std::to_string(T) + " overflows");
  }
  if (B < 1) return InvalidArgument("batch size " + std::to_string(B) + " must be at least 1");
  if (T < 1 || T > c.max_seq_len) {
    return InvalidArgument("sequence length " + std::to_string(T) + " must be between 1 and " +
                           key_value("model.max_seq_len", c.max_seq_len));
  }
  if (inputs != nullptr) MS_RETURN_IF_ERROR(validate_tokens(inputs, B * T, c.vocab_size, "input"));
  if (targets != nullptr) {
    MS_RETURN_IF_ERROR(validate_tokens(targets, B * T, c.vocab_size, "target"));
  }
  if (tp.sequence_parallel && (B * T) % tp.size != 0) {
    return InvalidArgument("sequence parallelism splits the micro-batch's " +
                           std::to_string(B * T) + " tokens (batch " + std::to_string(B) +
                           " x sequence " + std::to_string(T) + ") evenly, so tp (" +
                           std::to_string(tp.size) + ") must divide them");
  }
  return Dims{B, T, B * T, tp.sequence_parallel ? B * T / tp.size : B * T};
}

// Mean loss over the tokens, summed in double in token order.
double mean_loss(const std::vector<float>& token_loss, int64_t n) {
  return std::accumulate(token_loss.begin(), token_loss.begin() + n, 0.0) /
         static_cast<double>(n);
}

}  // namespace

// The token losses into m.pass.token_loss and, when grad_scale is not 0, d(grad_scale * mean loss)
// / d(logits) into m.pass.logits: over the local vocabulary columns under tp (never gathered).
Status Transformer::Impl::loss(const int32_t* targets, const Dims& d, float grad_scale,
                               bool write_grad) {
  std::vector<float>& token_loss = pass.token_loss;
  std::vector<float>& logits = pass.logits;
  token_loss.resize(static_cast<size_t>(d.N));
  const float scale = grad_scale / static_cast<float>(d.N);
  if (!tp.active()) {
    be->softmax_cross_entropy(logits.data(), targets, token_loss.data(), d.N, cfg.vocab_size,
                               scale, write_grad);
    return Status::OK();
  }
  MS_RETURN_IF_ERROR(tp.error);
  // Two all-reduces of (N)-sized vectors (row max, then the sums); counted as one here.
  tp.error = tp.blocking("allreduce", static_cast<uint64_t>(3 * d.N) * sizeof(float), [&] {
    return parallel::vocab_parallel_cross_entropy(*tp.comm, tp.vocab, logits.data(),
                                                  tp.vocab_rows, targets, token_loss.data(), d.N,
                                                  scale, write_grad);
  });
  return tp.error;
}

namespace {

Status need_whole_model(const PipelineChunk& chunk, const char* what) {
  if (chunk.first && chunk.last) return Status::OK();
  return FailedPrecondition(std::string(what) + " needs the whole model, but this chunk holds "
                            "one pipeline stage; use stage_forward and stage_backward");
}

}  // namespace

Result<LossStats> Transformer::forward_backward(const int32_t* inputs, const int32_t* targets,
                                                int64_t B, int64_t T, float grad_scale,
                                                const BackwardHooks* hooks) {
  MS_RETURN_IF_ERROR(need_whole_model(impl_->chunk, "forward_backward"));
  MS_ASSIGN_OR_RETURN(const Dims d, check_batch(impl_->cfg, impl_->tp, inputs, targets, B, T));
  Impl& m = *impl_;
  m.pass.inputs.assign(inputs, inputs + d.N);
  const double aux_sum = m.forward(inputs, nullptr, d);
  MS_RETURN_IF_ERROR(m.loss(targets, d, grad_scale, true));
  const double layers = static_cast<double>(m.cfg.n_layers);
  m.pass.aux_grad = static_cast<float>(grad_scale * m.cfg.moe.aux_loss_coef / layers);
  m.pass.z_grad = static_cast<float>(grad_scale * m.cfg.moe.z_loss_coef / layers);
  m.backward(nullptr, nullptr, d, hooks);
  MS_RETURN_IF_ERROR(m.tp.error);
  MS_RETURN_IF_ERROR(m.ep.error);
  MS_RETURN_IF_ERROR(m.cp.error);
  return LossStats{mean_loss(m.pass.token_loss, d.N), m.is_moe() ? aux_sum / layers : 0.0,
                   m.pass.z_sum / layers, d.N};
}

Result<LossStats> Transformer::forward_loss(const int32_t* inputs, const int32_t* targets,
                                            int64_t B, int64_t T) {
  MS_RETURN_IF_ERROR(need_whole_model(impl_->chunk, "forward_loss"));
  MS_ASSIGN_OR_RETURN(const Dims d, check_batch(impl_->cfg, impl_->tp, inputs, targets, B, T));
  Impl& m = *impl_;
  const double aux_sum = m.forward(inputs, nullptr, d);
  MS_RETURN_IF_ERROR(m.loss(targets, d, 0.0f, false));
  MS_RETURN_IF_ERROR(m.ep.error);
  MS_RETURN_IF_ERROR(m.cp.error);
  const double layers = static_cast<double>(m.cfg.n_layers);
  return LossStats{mean_loss(m.pass.token_loss, d.N), m.is_moe() ? aux_sum / layers : 0.0,
                   m.pass.z_sum / layers, d.N};
}

Result<Tensor> Transformer::forward_logits(const int32_t* inputs, int64_t B, int64_t T) {
  if (impl_->tp.active()) {
    return FailedPrecondition("forward_logits needs the whole vocabulary on one rank, but this "
                              "one holds a tensor-parallel slice");
  }
  if (impl_->cp.active()) {
    return FailedPrecondition("forward_logits needs whole sequences, but this rank holds a "
                              "context-parallel share of them");
  }
  MS_RETURN_IF_ERROR(need_whole_model(impl_->chunk, "forward_logits"));
  MS_ASSIGN_OR_RETURN(const Dims d, check_batch(impl_->cfg, impl_->tp, inputs, nullptr, B, T));
  impl_->forward(inputs, nullptr, d);
  Tensor out = Tensor::empty(DType::kF32, {B, T, impl_->cfg.vocab_size});
  std::copy(impl_->pass.logits.begin(), impl_->pass.logits.begin() + out.numel(),
            out.data<float>());
  return out;
}

const PipelineChunk& Transformer::chunk() const { return impl_->chunk; }

int64_t Transformer::stage_activation_elements(int64_t B, int64_t T) const {
  const int64_t N = B * T;
  return (impl_->tp.sequence_parallel ? N / impl_->tp.size : N) * impl_->cfg.d_model;
}

namespace {

Status check_span(size_t have, int64_t want, const char* what, int mb) {
  if (static_cast<int64_t>(have) == want) return Status::OK();
  return InvalidArgument(std::string(what) + " of micro-batch " + std::to_string(mb) + " has " +
                         std::to_string(have) + " floats; this stage expects " +
                         std::to_string(want));
}

}  // namespace

Result<LossStats> Transformer::stage_forward(int mb, const StageBatch& batch,
                                             std::span<const float> input,
                                             std::span<float> output) {
  Impl& m = *impl_;
  const PipelineChunk& c = m.chunk;
  if (m.in_flight.count(mb) != 0 || m.pending_weight.count(mb) != 0) {
    return InvalidArgument("micro-batch " + std::to_string(mb) + " is already in flight");
  }
  if ((c.first && batch.inputs == nullptr) || (c.last && batch.targets == nullptr)) {
    return InvalidArgument("the first pipeline stage needs the inputs and the last the targets");
  }
  if (m.documents.enabled && batch.inputs == nullptr) {
    return InvalidArgument("document masking needs the inputs on every pipeline stage (they "
                           "say where the documents end)");
  }
  MS_ASSIGN_OR_RETURN(const Dims d, check_batch(m.cfg, m.tp, c.first ? batch.inputs : nullptr,
                                                c.last ? batch.targets : nullptr, batch.B,
                                                batch.T));
  const int64_t elements = d.Nr * m.cfg.d_model;
  if (!c.first) MS_RETURN_IF_ERROR(check_span(input.size(), elements, "the input", mb));
  if (!c.last) MS_RETURN_IF_ERROR(check_span(output.size(), elements, "the output", mb));
  if (c.first) m.pass.inputs.assign(batch.inputs, batch.inputs + d.N);
  const double layers = static_cast<double>(m.cfg.n_layers);
  m.pass.aux_grad = static_cast<float>(batch.grad_scale * m.cfg.moe.aux_loss_coef / layers);
  m.pass.z_grad = static_cast<float>(batch.grad_scale * m.cfg.moe.z_loss_coef / layers);
  const double aux_sum = m.forward(batch.inputs, c.first ? nullptr : input.data(), d);
  LossStats stats{0.0, m.is_moe() ? aux_sum / layers : 0.0, m.pass.z_sum / layers, d.N};
  if (c.last) {
    MS_RETURN_IF_ERROR(m.loss(batch.targets, d, batch.grad_scale, batch.backward));
    stats.loss = mean_loss(m.pass.token_loss, d.N);
  } else {
    std::copy(m.pass.final_x.begin(), m.pass.final_x.begin() + elements, output.begin());
  }
  MS_RETURN_IF_ERROR(m.tp.error);
  MS_RETURN_IF_ERROR(m.ep.error);
  MS_RETURN_IF_ERROR(m.cp.error);
  if (!batch.backward) return stats;
  // The pass moves aside with its buffers until its backward; a spare one takes its place.
  m.in_flight[mb] = std::move(m.pass);
  if (m.spare_passes.empty()) {
    m.pass = PassActs{};
  } else {
    m.pass = std::move(m.spare_passes.back());
    m.spare_passes.pop_back();
  }
  return stats;
}

Status Transformer::stage_backward(int mb, std::span<const float> grad_out,
                                   std::span<float> grad_in, bool defer_weight_grads,
                                   const BackwardHooks* hooks) {
  Impl& m = *impl_;
  auto it = m.in_flight.find(mb);
  if (it == m.in_flight.end()) {
    return FailedPrecondition("stage_backward of micro-batch " + std::to_string(mb) +
                              ", which has no forward in flight on this stage");
  }
  const Dims d = it->second.d;
  const int64_t elements = d.Nr * m.cfg.d_model;
  if (!m.chunk.last) MS_RETURN_IF_ERROR(check_span(grad_out.size(), elements, "the gradient", mb));
  if (!m.chunk.first) {
    MS_RETURN_IF_ERROR(check_span(grad_in.size(), elements, "the input gradient", mb));
  }
  std::swap(m.pass, it->second);
  std::vector<DeferredGemm> deferred;
  m.defer_into = defer_weight_grads ? &deferred : nullptr;
  m.backward(grad_out.data(), grad_in.data(), d, hooks);
  m.defer_into = nullptr;
  // Back to a spare pass; mb's buffers are kept for the next micro-batch.
  std::swap(m.pass, it->second);
  m.spare_passes.push_back(std::move(it->second));
  m.in_flight.erase(it);
  if (defer_weight_grads) m.pending_weight[mb] = std::move(deferred);
  MS_RETURN_IF_ERROR(m.tp.error);
  MS_RETURN_IF_ERROR(m.ep.error);
  return m.cp.error;
}

Status Transformer::stage_backward_weight(int mb) {
  Impl& m = *impl_;
  auto it = m.pending_weight.find(mb);
  if (it == m.pending_weight.end()) {
    return FailedPrecondition("stage_backward_weight of micro-batch " + std::to_string(mb) +
                              ", whose weight gradients were not deferred on this stage");
  }
  for (const DeferredGemm& gemm : it->second) {
    m.be->linear_backward(gemm.x.data(), nullptr, gemm.dy.data(), nullptr, m.g(gemm.param),
                          gemm.n, gemm.in, gemm.out);
  }
  m.pending_weight.erase(it);
  return Status::OK();
}

int Transformer::tp_size() const { return impl_->tp.size; }
int Transformer::tp_rank() const { return impl_->tp.rank; }

Transformer::MoeLoad Transformer::take_moe_load() {
  MoeLoad load{std::move(impl_->load_routed), std::move(impl_->load_dropped),
               std::move(impl_->load_chosen)};
  impl_->load_routed.clear();
  impl_->load_dropped.clear();
  impl_->load_chosen.clear();
  return load;
}

void Transformer::update_expert_bias(const std::vector<std::vector<int64_t>>& chosen,
                                     double rate) {
  Impl& m = *impl_;
  const int64_t first = m.chunk.first_layer;
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const LayerIndex& li = m.layers[l];
    const size_t layer = static_cast<size_t>(first) + l;
    if (li.expert_bias == kNoParam || layer >= chosen.size()) continue;
    const std::vector<int64_t>& counts = chosen[layer];
    if (static_cast<int64_t>(counts.size()) != m.cfg.moe.num_experts) continue;
    m.be->moe_update_expert_bias(counts.data(), m.w(li.expert_bias), m.cfg.moe.num_experts,
                                 rate);
  }
}

parallel::CommStats Transformer::take_ep_comm_stats() {
  EpState& ep = impl_->ep;
  const parallel::CommStats stats{ep.exchanges, ep.bytes, ep.active_s, ep.exposed_s};
  ep.exchanges = 0;
  ep.bytes = 0;
  ep.active_s = 0;
  ep.exposed_s = 0;
  return stats;
}

parallel::CommStats Transformer::take_cp_comm_stats() {
  CpState& cp = impl_->cp;
  const parallel::CommStats stats{cp.transfers, cp.bytes, cp.active_s, cp.exposed_s};
  cp.transfers = 0;
  cp.bytes = 0;
  cp.active_s = 0;
  cp.exposed_s = 0;
  return stats;
}

double Transformer::take_attention_seconds() {
  const double s = impl_->attention_s;
  impl_->attention_s = 0;
  return s;
}

parallel::CommStats Transformer::take_tp_comm_stats() {
  const parallel::CommStats stats = impl_->tp.stats;
  impl_->tp.stats = {};
  return stats;
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

double training_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const double attention = 12.0 * static_cast<double>(c.n_layers * c.d_model) *
                           mean_visible_keys(seq_len, c.sliding_window);
  return 6.0 * static_cast<double>(active_matmul_params(c)) + attention;
}

double Transformer::flops_per_token(int64_t seq_len) const {
  return training_flops_per_token(impl_->cfg, seq_len);
}

}  // namespace ms::model

namespace ms::model {

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
