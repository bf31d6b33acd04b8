// Transformer construction (this rank's share under tp/ep/pp, its parameters), the public
// forward/backward, pipeline-stage and statistics entry points. Elsewhere: the config rules
// (model/config_rules.cc), the parameter table and its initialization (model/parameter_table.cc),
// parameter, FLOP and activation accounting (model/accounting.cc), the layers
// (model/layers.cc), the blocks (model/blocks/) and cached passes
// (model/inference.cc).
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
#include "parallel/ep_placement.h"
#include "parallel/tp_shards.h"
#include "parallel/vocab_parallel.h"

namespace ms::model {

using config::ModelConfig;

namespace {

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
  if (!parallel::ep_divides_experts(c.moe.num_experts, group->size())) {
    return InvalidArgument(key_value("model.moe.num_experts", c.moe.num_experts) +
                           " must be a positive multiple of parallel.ep (" +
                           std::to_string(group->size()) + ")");
  }
  ep.comm = group;
  ep.size = group->size();
  ep.rank = group->rank();
  const parallel::ExpertRange mine =
      parallel::ep_local_experts(c.moe.num_experts, ep.size, ep.rank);
  ep.local_experts = mine.count;
  ep.first_expert = mine.first;
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
  if (parallel.backend != nullptr) impl->be = parallel.backend;
  // The tp, ep and cp exchanges move the activations where the backend keeps them.
  const Device device = impl->be->runtime().device();
  for (const comm::Communicator* group : {parallel.tp, parallel.ep, parallel.cp}) {
    MS_RETURN_IF_ERROR(comm::check_memory(group, device, "the model's activations"));
  }
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
  impl->tp.overlap.backend = impl->be;
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
  for (Parameter& p : impl_->params) {
    // Gradients their owner moved to the backend's device are zeroed there, never by the host.
    if (p.grad.device().is_host()) {
      p.grad.fill(0.0f);
    } else {
      impl_->be->fill(p.grad.data<float>(), p.grad.numel(), 0.0f);
    }
  }
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

// Mean loss over the tokens, summed in double in token order on the host (the n losses copied
// out of the device's memory).
Result<double> mean_loss(ops::Backend& be, const Floats& token_loss, int64_t n) {
  std::vector<float> host(static_cast<size_t>(n));
  MS_RETURN_IF_ERROR(token_loss.read(be, 0, host));
  return std::accumulate(host.begin(), host.end(), 0.0) / static_cast<double>(n);
}

}  // namespace

// The token losses into m.pass.token_loss and, when grad_scale is not 0, d(grad_scale * mean loss)
// / d(logits) into m.pass.logits: over the local vocabulary columns under tp (never gathered).
Status Transformer::Impl::loss(const int32_t* targets, const Dims& d, float grad_scale,
                               bool write_grad) {
  Floats& token_loss = pass.token_loss;
  Floats& logits = pass.logits;
  sized(token_loss, d.N);
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
                                                  scale, write_grad, *be);
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
  MS_ASSIGN_OR_RETURN(const double loss, mean_loss(*m.be, m.pass.token_loss, d.N));
  return LossStats{loss, m.is_moe() ? aux_sum / layers : 0.0, m.pass.z_sum / layers, d.N};
}

Result<LossStats> Transformer::forward_backward_weighted(const int32_t* inputs,
                                                         const int32_t* targets,
                                                         std::span<const float> token_weights,
                                                         int64_t B, int64_t T,
                                                         std::span<float> token_losses,
                                                         const BackwardHooks* hooks) {
  MS_RETURN_IF_ERROR(need_whole_model(impl_->chunk, "forward_backward_weighted"));
  if (impl_->cp.active()) {
    return FailedPrecondition("token-weighted losses need whole sequences, but this rank holds a "
                              "context-parallel share of them");
  }
  MS_ASSIGN_OR_RETURN(const Dims d, check_batch(impl_->cfg, impl_->tp, inputs, targets, B, T));
  if (static_cast<int64_t>(token_weights.size()) != d.N ||
      (!token_losses.empty() && static_cast<int64_t>(token_losses.size()) != d.N)) {
    return InvalidArgument("token weights and losses need one entry per token (" +
                           std::to_string(d.N) + "), got " + std::to_string(token_weights.size()) +
                           " and " + std::to_string(token_losses.size()));
  }
  Impl& m = *impl_;
  m.pass.inputs.assign(inputs, inputs + d.N);
  const double aux_sum = m.forward(inputs, nullptr, d);
  // The loss with a gradient scale of 1 per row (loss() divides by N), then each row of
  // d(CE)/d(logits) scaled by its token's weight: the gradient is linear in the row's loss.
  MS_RETURN_IF_ERROR(m.loss(targets, d, static_cast<float>(d.N), true));
  const size_t row = m.pass.logits.size() / static_cast<size_t>(d.N);
  std::vector<float> grad(m.pass.logits.size());
  MS_RETURN_IF_ERROR(m.pass.logits.read(*m.be, 0, grad));
  for (int64_t i = 0; i < d.N; ++i) {
    const float w = token_weights[static_cast<size_t>(i)];
    float* r = grad.data() + static_cast<size_t>(i) * row;
    for (size_t j = 0; j < row; ++j) r[j] *= w;
  }
  MS_RETURN_IF_ERROR(m.pass.logits.write(*m.be, 0, grad));
  const double layers = static_cast<double>(m.cfg.n_layers);
  m.pass.aux_grad = static_cast<float>(m.cfg.moe.aux_loss_coef / layers);
  m.pass.z_grad = static_cast<float>(m.cfg.moe.z_loss_coef / layers);
  m.backward(nullptr, nullptr, d, hooks);
  MS_RETURN_IF_ERROR(m.tp.error);
  MS_RETURN_IF_ERROR(m.ep.error);
  if (!token_losses.empty()) MS_RETURN_IF_ERROR(m.pass.token_loss.read(*m.be, 0, token_losses));
  MS_ASSIGN_OR_RETURN(const double loss, mean_loss(*m.be, m.pass.token_loss, d.N));
  return LossStats{loss, m.is_moe() ? aux_sum / layers : 0.0, m.pass.z_sum / layers, d.N};
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
  MS_ASSIGN_OR_RETURN(const double loss, mean_loss(*m.be, m.pass.token_loss, d.N));
  return LossStats{loss, m.is_moe() ? aux_sum / layers : 0.0, m.pass.z_sum / layers, d.N};
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
  // The logits come back to the host: copied out of the device's memory.
  Tensor out = Tensor::empty(DType::kF32, {B, T, impl_->cfg.vocab_size});
  MS_RETURN_IF_ERROR(impl_->pass.logits.read(*impl_->be, 0, out.span<float>()));
  return out;
}

Result<Transformer::TokenLogProbs> Transformer::forward_log_probs(
    const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
    std::span<const int64_t> positions) {
  Impl& m = *impl_;
  if (m.cp.active()) {
    return FailedPrecondition("forward_log_probs needs whole sequences, but this rank holds a "
                              "context-parallel share of them");
  }
  MS_RETURN_IF_ERROR(need_whole_model(m.chunk, "forward_log_probs"));
  MS_ASSIGN_OR_RETURN(const Dims d, check_batch(m.cfg, m.tp, inputs, targets, B, T));
  for (int64_t pos : positions) {
    if (pos < 0 || pos >= d.N) {
      return InvalidArgument("log-prob position " + std::to_string(pos) + " lies outside the " +
                             std::to_string(d.N) + " tokens of the batch");
    }
  }
  m.forward(inputs, nullptr, d);
  MS_RETURN_IF_ERROR(m.tp.error);
  MS_RETURN_IF_ERROR(m.ep.error);
  // The logits come to the host: (N, vocab) whole, or this rank's (N, vocab_rows) columns.
  const int64_t ld = m.tp.active() ? m.tp.vocab_rows : m.cfg.vocab_size;
  std::vector<float> logits(static_cast<size_t>(d.N * ld));
  MS_RETURN_IF_ERROR(m.pass.logits.read(*m.be, 0, logits));
  TokenLogProbs out;
  out.log_probs.resize(positions.size());
  out.entropy.resize(positions.size());
  if (!m.tp.active()) {
    MS_ASSIGN_OR_RETURN(const parallel::VocabShard whole,
                        parallel::vocab_shard(m.cfg.vocab_size, 1, 0));
    MS_RETURN_IF_ERROR(parallel::vocab_parallel_log_probs(nullptr, whole, logits.data(), ld,
                                                          targets, positions,
                                                          out.log_probs.data(),
                                                          out.entropy.data()));
    return out;
  }
  m.tp.error = m.tp.blocking(
      "allgather", static_cast<uint64_t>(positions.size()) * (sizeof(float) + 3 * sizeof(double)),
      [&] {
        return parallel::vocab_parallel_log_probs(m.tp.comm, m.tp.vocab, logits.data(), ld,
                                                  targets, positions, out.log_probs.data(),
                                                  out.entropy.data());
      });
  MS_RETURN_IF_ERROR(m.tp.error);
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
    MS_ASSIGN_OR_RETURN(stats.loss, mean_loss(*m.be, m.pass.token_loss, d.N));
  } else {
    m.be->copy(m.pass.final_x.data(), output.data(), elements);
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
  const parallel::CommStats stats = ep.stats;
  ep.stats = {};
  return stats;
}

parallel::CommStats Transformer::take_cp_comm_stats() {
  CpState& cp = impl_->cp;
  const parallel::CommStats stats = cp.stats;
  cp.stats = {};
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

}  // namespace ms::model
