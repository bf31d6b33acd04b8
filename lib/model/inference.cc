// Transformer::forward_cached: the decode/prefill path over a paged key/value cache. It runs
// the training model's blocks (model/blocks/: norm, attention, the SwiGLU MLP, MoE, the
// embedding and output layer) over every token of every chunk at once; only what depends on a
// token's absolute position differs from training, and the attention block takes it as
// PagedKeys: rotary embeddings at each token's own position, and keys and values read from the
// sequence's cache blocks after the pass appends its own. Under document masking a token
// attends from its document's start on (ops::PagedQuery::first).
// The pass runs in stages that stop where a MoE layer's tokens go to their experts, so the
// experts may run on other ranks (infer/disaggregated.h); forward_cached runs them here.
// Every linear layer of the pass (attention, dense FFN, routed and shared experts, lm_head)
// goes through Impl::linear (model/blocks/linear.cc), so serving may hold those weights in
// another format behind the CachedLinear hook; training passes never ask the hook.
#include <algorithm>
#include <string>

#include "model/model_impl.h"
#include "ops/paged_attention.h"

namespace ms::model {

void Transformer::Impl::begin_pass(CachedPassState& p, std::span<const CachedChunk> chunks,
                                   const PagedKvCache& cache) {
  p.cache = &cache;
  p.layers_total = layers.size();
  for (const CachedChunk& c : chunks) {
    int64_t doc_start = documents.enabled ? c.doc_start : 0;
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      const int64_t pos = c.start + static_cast<int64_t>(i);
      p.ids.push_back(c.tokens[i]);
      p.slots.push_back(ops::PagedQuery{pos, c.blocks.data(), doc_start});
      p.rope_pos.push_back(documents.positions ? pos - doc_start : pos);
      // The end-of-document token belongs to the document it ends.
      if (documents.enabled && c.tokens[i] == documents.eod_id) doc_start = pos + 1;
      if (c.all_logits) p.last_rows.push_back(static_cast<int64_t>(p.ids.size()) - 1);
    }
    if (!c.all_logits) p.last_rows.push_back(static_cast<int64_t>(p.ids.size()) - 1);
  }
  const int64_t N = static_cast<int64_t>(p.ids.size()), D = cfg.d_model;
  be->embedding_forward(p.ids.data(), w(embed), sized(p.x, N * D), N, D);
}

// Runs layers from p.layer: attention (writing the cache), the residual and, for a dense
// layer, the whole FFN; stops at the first MoE layer once its tokens are grouped by expert.
void Transformer::Impl::pass_to_experts(CachedPassState& p, const std::function<void()>& poll) {
  const ServingScope serving_linears(*this);
  const PagedKvCache& cache = *p.cache;
  const int64_t N = static_cast<int64_t>(p.ids.size()), D = cfg.d_model;
  const Dims d = Dims::rows(N);
  PagedKeys keys;
  keys.shape.tokens = N;
  keys.shape.heads = cfg.n_heads;
  keys.shape.kv_heads = cfg.n_kv_heads;
  keys.shape.head_dim = head_dim();
  keys.shape.block_size = cache.block_size;
  keys.shape.window = cfg.sliding_window;
  keys.slots = p.slots.data();
  keys.positions = p.rope_pos.data();
  keys.poll = &poll;
  for (; p.layer < layers.size(); ++p.layer) {
    const size_t l = p.layer;
    const LayerIndex& li = layers[l];
    LayerActs& a = pass.acts[l];
    float* normed = sized(p.normed, N * D);
    norm_forward(li.attn_norm, p.x.data(), normed, a.rstd1, N);
    keys.k_cache = cache.k[l];
    keys.v_cache = cache.v[l];
    attention_forward(li, a.attn, normed, d, {}, &keys);
    float* h = sized(p.h, N * D);
    attention_output(li, a.attn, nullptr, h, d);
    be->add_into(h, p.x.data(), N * D);
    if (!cfg.parallel_block) norm_forward(li.ffn_norm, h, normed, a.rstd2, N);
    if (is_moe()) {
      moe_dispatch(p.moe, li, normed, p.dispatch, N, false);
      p.awaiting_experts = true;
      return;
    }
    mlp_forward(li.mlp, tp.d_ff, a.mlp, normed, sized(p.ffn_out, N * D), d, MlpRows::kExchanged);
    finish_layer(p);
  }
}

// p.ffn_out holds the FFN's output: the layer's result is h + ffn_out (the parallel block's h
// already holds x + attention). Moves to the next layer.
void Transformer::Impl::finish_layer(CachedPassState& p) {
  const int64_t n = static_cast<int64_t>(p.x.size());
  float* out = p.ffn_out.data();
  be->add_into(out, p.h.data(), n);
  p.x.swap(p.ffn_out);
}

void Transformer::Impl::pass_apply_experts(CachedPassState& p, const float* expert_out) {
  const ServingScope serving_linears(*this);
  const int64_t N = static_cast<int64_t>(p.ids.size());
  moe_combine(p.moe, layers[p.layer], p.normed.data(), expert_out,
              sized(p.ffn_out, N * cfg.d_model), p.shared, N);
  finish_layer(p);
  p.awaiting_experts = false;
  ++p.layer;
}

void Transformer::Impl::pass_logits(CachedPassState& p) {
  const ServingScope serving_linears(*this);
  const int64_t D = cfg.d_model, C = static_cast<int64_t>(p.last_rows.size());
  float* last = sized(p.last, C * D);
  be->gather_rows(p.x.data(), p.last_rows.data(), C, D, last);
  output_forward(last, Dims::rows(C), p.last_normed, p.last_rstd, p.last_gathered,
                 sized(p.logits, C * cfg.vocab_size));
}

namespace {

Status check_cache(const config::ModelConfig& c, const PagedKvCache& cache) {
  const int64_t layers = c.n_layers;
  if (cache.kv_heads != c.n_kv_heads || cache.head_dim != c.d_model / c.n_heads ||
      static_cast<int64_t>(cache.k.size()) != layers ||
      static_cast<int64_t>(cache.v.size()) != layers || cache.block_size < 1) {
    return InvalidArgument("KV cache shape (kv_heads " + std::to_string(cache.kv_heads) +
                           ", head_dim " + std::to_string(cache.head_dim) + ", layers " +
                           std::to_string(cache.k.size()) +
                           ") does not match the model; build it from the model's config");
  }
  return Status::OK();
}

Status check_chunk(const config::ModelConfig& c, const PagedKvCache& cache,
                   const CachedChunk& chunk, size_t index, bool documents) {
  const std::string where = "chunk " + std::to_string(index) + ": ";
  const int64_t n = static_cast<int64_t>(chunk.tokens.size());
  if (n == 0) return InvalidArgument(where + "has no tokens");
  if (documents && (chunk.doc_start < 0 || chunk.doc_start > chunk.start)) {
    return InvalidArgument(where + "doc_start " + std::to_string(chunk.doc_start) +
                           " must lie between 0 and the chunk's start " +
                           std::to_string(chunk.start));
  }
  const int64_t end = chunk.start + n;
  if (chunk.start < 0 || end > c.max_seq_len) {
    return InvalidArgument(where + "positions up to " + std::to_string(end) +
                           " exceed model.max_seq_len (" + std::to_string(c.max_seq_len) + ")");
  }
  if (static_cast<int64_t>(chunk.blocks.size()) * cache.block_size < end) {
    return InvalidArgument(where + "block table covers fewer than " + std::to_string(end) +
                           " positions");
  }
  for (int32_t b : chunk.blocks) {
    if (b < 0 || b >= cache.num_blocks) {
      return InvalidArgument(where + "block " + std::to_string(b) + " is outside the cache of " +
                             std::to_string(cache.num_blocks) + " blocks");
    }
  }
  for (int32_t t : chunk.tokens) {
    if (t < 0 || t >= c.vocab_size) {
      return InvalidArgument(where + "token " + std::to_string(t) +
                             " is outside the vocabulary of model.vocab_size (" +
                             std::to_string(c.vocab_size) + ")");
    }
  }
  return Status::OK();
}

}  // namespace

Result<CachedPass> Transformer::begin_cached(std::span<const CachedChunk> chunks,
                                             const PagedKvCache& cache) {
  if (impl_->tp.active()) {
    return FailedPrecondition("serving needs the whole model on one rank, but this one holds a "
                              "tensor-parallel slice (tp " + std::to_string(impl_->tp.size) +
                              "); load the checkpoint into a model without tp");
  }
  if (!impl_->chunk.first || !impl_->chunk.last) {
    return FailedPrecondition("serving needs the whole model on one rank, but this one holds a "
                              "pipeline stage; load the checkpoint into a model without pp");
  }
  if (chunks.empty()) return InvalidArgument("forward_cached needs at least one chunk");
  MS_RETURN_IF_ERROR(check_cache(impl_->cfg, cache));
  for (size_t i = 0; i < chunks.size(); ++i) {
    MS_RETURN_IF_ERROR(check_chunk(impl_->cfg, cache, chunks[i], i, impl_->documents.enabled));
  }
  CachedPass pass;
  impl_->begin_pass(*pass.s_, chunks, cache);
  return pass;
}

void Transformer::run_to_experts(CachedPass& pass, const std::function<void()>& poll) {
  if (!pass.awaiting_experts()) impl_->pass_to_experts(*pass.s_, poll);
}

Status Transformer::apply_experts(CachedPass& pass, std::span<const float> expert_out) {
  if (!pass.awaiting_experts()) {
    return InvalidArgument("apply_experts: the pass is not waiting for experts");
  }
  if (expert_out.size() != pass.dispatch_rows().size()) {
    return InvalidArgument("apply_experts: expected " +
                           std::to_string(pass.dispatch_rows().size()) + " values, got " +
                           std::to_string(expert_out.size()));
  }
  impl_->pass_apply_experts(*pass.s_, expert_out.data());
  return Status::OK();
}

Result<Tensor> Transformer::cached_logits(CachedPass& pass) {
  if (!pass.finished()) {
    return FailedPrecondition("cached_logits: layer " + std::to_string(pass.layer()) +
                              " has not run yet");
  }
  const int64_t C = static_cast<int64_t>(pass.s_->last_rows.size());
  Tensor out = Tensor::empty(DType::kF32, {C, impl_->cfg.vocab_size});
  impl_->pass_logits(*pass.s_);
  // The logits come back to the host: copied out of the device's memory.
  MS_RETURN_IF_ERROR(pass.s_->logits.read(*impl_->be, 0, out.span<float>()));
  return out;
}

Status Transformer::run_experts(size_t layer, std::span<const int64_t> offsets, const float* x,
                                float* y) {
  if (impl_->tp.active()) {
    return FailedPrecondition("run_experts needs whole experts, but this rank holds a "
                              "tensor-parallel slice of their d_ff");
  }
  const config::ModelConfig& c = impl_->cfg;
  const int64_t E = c.moe.num_experts;
  if (E == 0 || layer >= impl_->layers.size()) {
    return InvalidArgument("run_experts: layer " + std::to_string(layer) +
                           " is not a MoE layer of this model");
  }
  if (static_cast<int64_t>(offsets.size()) != E + 1 || offsets[0] != 0) {
    return InvalidArgument("run_experts: offsets must have num_experts + 1 entries from 0");
  }
  for (int64_t e = 0; e < E; ++e) {
    if (offsets[e + 1] < offsets[e]) return InvalidArgument("run_experts: offsets decrease");
    if (offsets[e + 1] > offsets[e] && !holds_expert(layer, e)) {
      return InvalidArgument("run_experts: rows for expert " + std::to_string(e) + " of layer " +
                             std::to_string(layer) + ", whose weights this rank does not hold");
    }
  }
  const Impl::ServingScope serving_linears(*impl_);
  impl_->experts_forward(impl_->layers[layer], impl_->scratch_experts, x, offsets.data(), y);
  return Status::OK();
}

int64_t Transformer::release_for_serving(const std::function<bool(size_t param_index)>& keep) {
  int64_t held = 0;
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    Parameter& p = impl_->params[i];
    p.grad = Tensor();
    if (keep(i)) {
      held += static_cast<int64_t>(p.value.nbytes());
    } else {
      p.value = Tensor();
    }
  }
  return held;
}

std::vector<size_t> Transformer::cached_linear_parameters() const {
  std::vector<size_t> out;
  const auto add = [&out](const MlpIndex& m) {
    if (m.gate != kNoParam) out.insert(out.end(), {m.gate, m.up, m.down});
  };
  for (const LayerIndex& li : impl_->layers) {
    out.insert(out.end(), {li.q, li.k, li.v, li.o});
    add(li.mlp);
    for (const MlpIndex& e : li.experts) add(e);
    add(li.shared);
  }
  if (impl_->lm_head != impl_->embed) out.push_back(impl_->lm_head);
  return out;
}

void Transformer::set_cached_linear(CachedLinear linear, std::span<const size_t> answered) {
  impl_->cached_linear_hook = std::move(linear);
  impl_->cached_linear_answers.assign(impl_->params.size(), false);
  if (!impl_->cached_linear_hook) return;
  for (size_t i : answered) {
    if (i < impl_->params.size()) impl_->cached_linear_answers[i] = true;
  }
}

bool Transformer::holds_expert(size_t layer, int64_t expert) const {
  if (layer >= impl_->layers.size()) return false;
  const std::vector<MlpIndex>& experts = impl_->layers[layer].experts;
  if (expert < 0 || expert >= static_cast<int64_t>(experts.size())) return false;
  const MlpIndex& m = experts[static_cast<size_t>(expert)];
  const std::vector<bool>& answered = impl_->cached_linear_answers;
  for (size_t i : {m.gate, m.up, m.down}) {
    const bool hooked = i < answered.size() && answered[i];
    if (impl_->params[i].value.raw_data() == nullptr && !hooked) return false;
  }
  return true;
}

std::optional<Transformer::ExpertRef> Transformer::routed_expert(size_t param_index) const {
  for (size_t l = 0; l < impl_->layers.size(); ++l) {
    const LayerIndex& li = impl_->layers[l];
    if (param_index < li.first_param || param_index >= li.end_param) continue;
    for (size_t e = 0; e < li.experts.size(); ++e) {
      const MlpIndex& m = li.experts[e];
      if (param_index == m.gate || param_index == m.up || param_index == m.down) {
        return ExpertRef{l, static_cast<int64_t>(e)};
      }
    }
    return std::nullopt;
  }
  return std::nullopt;
}

Result<Tensor> Transformer::forward_cached(std::span<const CachedChunk> chunks,
                                           const PagedKvCache& cache) {
  MS_ASSIGN_OR_RETURN(CachedPass pass, begin_cached(chunks, cache));
  for (run_to_experts(pass); !pass.finished(); run_to_experts(pass)) {
    const std::span<const int64_t> offsets = pass.dispatch_offsets();
    Floats& out = impl_->scratch.expert_out;  // reused from layer to layer
    impl_->sized(out, static_cast<int64_t>(pass.dispatch_rows().size()));
    MS_RETURN_IF_ERROR(run_experts(pass.layer(), offsets, pass.dispatch_rows().data(), out.data()));
    MS_RETURN_IF_ERROR(apply_experts(pass, {out.data(), out.size()}));
  }
  return cached_logits(pass);
}

CachedPass::CachedPass() : s_(std::make_unique<CachedPassState>()) {}
CachedPass::~CachedPass() = default;
CachedPass::CachedPass(CachedPass&&) noexcept = default;
CachedPass& CachedPass::operator=(CachedPass&&) noexcept = default;

int64_t CachedPass::tokens() const { return static_cast<int64_t>(s_->ids.size()); }
size_t CachedPass::layer() const { return s_->layer; }
bool CachedPass::awaiting_experts() const { return s_->awaiting_experts; }
bool CachedPass::finished() const {
  return !s_->awaiting_experts && s_->layer == s_->layers_total;
}
std::span<const float> CachedPass::dispatch_rows() const {
  if (!s_->awaiting_experts) return {};
  return {s_->dispatch.data(), s_->dispatch.size()};
}
std::span<const int64_t> CachedPass::dispatch_offsets() const {
  if (!s_->awaiting_experts) return {};
  return s_->moe.routing.offsets;
}

}  // namespace ms::model
