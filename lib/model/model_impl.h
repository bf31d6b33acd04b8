// Private to lib/model: the Transformer's parameter table, the per-layer parameter indices, and
// the activations the forward keeps for the backward. Activation buffers live in the model and
// are reused from one micro-batch to the next, so steady-state training allocates nothing.
//
// What is kept per layer (N = B*T tokens): the block input, the RMSNorm rstd vectors, q/k/v
// after RoPE, the attention output and its log-sum-exp, the post-attention residual, the FFN's
// gate/up projections (and for MoE the router probabilities, routing, weights and expert
// outputs). Normed inputs and SwiGLU products are recomputed in the backward instead.
// parallel.recompute keeps less: selective drops the attention internals, full everything but
// the block input (LayerActs). With tensor parallelism the residual stream and norms hold this
// rank's rows (all N, or N/tp with sequence parallelism) and the projections its heads and
// d_ff slice (TpState).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/run_config.h"
#include "core/status.h"
#include "model/inference.h"
#include "model/transformer.h"
#include "ops/attention.h"
#include "ops/backend.h"
#include "ops/moe.h"
#include "ops/paged_attention.h"
#include "ops/rope.h"
#include "parallel/cp_ring.h"
#include "parallel/ep_exchange.h"
#include "parallel/tp_layout.h"
#include "parallel/tp_overlap.h"

namespace ms::model {

inline constexpr size_t kNoParam = std::numeric_limits<size_t>::max();

// Indices into the parameter table of one SwiGLU feed-forward (dense MLP or shared expert).
struct MlpIndex {
  size_t gate = kNoParam, up = kNoParam, down = kNoParam;
};

struct LayerIndex {
  size_t first_param = 0, end_param = 0;  // the layer's parameters are [first, end)
  size_t attn_norm = kNoParam, q = kNoParam, k = kNoParam, v = kNoParam, o = kNoParam;
  size_t ffn_norm = kNoParam;  // absent in the parallel block
  MlpIndex mlp;                // dense layers
  size_t router = kNoParam;    // MoE layers
  size_t expert_bias = kNoParam;  // model.moe.expert_bias: the routing bias, (E)
  std::vector<MlpIndex> experts;
  MlpIndex shared;             // MoE shared expert, when configured
};

struct MlpActs {
  std::vector<float> gate, up;  // (rows, d_ff)
};

struct MoeActs {
  std::vector<float> probs;    // (N, E)
  std::vector<float> lse;      // (N) logsumexp of the router logits (the z-loss)
  std::vector<float> weights;  // (N, k)
  ops::MoeRouting routing;
  MlpActs experts;             // (N*k, d_ff), rows grouped by expert; with ep the rows this
                               // rank's experts received
  std::vector<float> expert_out;  // (N*k, D) in dispatch order
  MlpActs shared;              // (N, shared_d_ff)
  // Expert parallelism: how this micro-batch's rows were exchanged over the ep group
  // (model/ep_comm.cc, parallel/ep_exchange.h), kept for the backward's exchanges.
  parallel::EpPlan ep;
  std::vector<float> ep_input;  // (received rows, D) in ep.rows' layout
  // Under cp: each expert's share f_e of the assignments over the whole micro-batch (the cp
  // group's tokens), which the load-balancing loss's backward reads.
  std::vector<double> aux_share;
  // parallel.expert_tp false under tp: the dispatch rows of this tp rank's tokens, grouped by
  // expert (slice_offsets: experts + 1), which the experts ran over without ep.
  std::vector<int64_t> slice_rows, slice_offsets;
};

// Attention internals: what selective recomputation recomputes in the backward. With tensor
// parallelism H and KV are this rank's heads.
struct AttnActs {
  std::vector<float> q, k, v;  // (N, H*hd), (N, KV*hd), (N, KV*hd) after RoPE
  std::vector<float> attn;     // (N, H*hd) attention output before o_proj
  std::vector<float> lse;      // (B, H, T)
};

// What one layer's forward keeps for its backward. Nr is the rows of the residual stream held
// here: N, or N/tp with sequence parallelism; projections and attention always see all N rows.
// x is kept per layer whatever parallel.recompute says; the rest lives in one shared working
// slot under full recomputation, and `attn` under selective recomputation too.
struct LayerActs {
  std::vector<float> x;        // (Nr, D) block input
  std::vector<float> rstd1;    // (Nr)
  AttnActs attn;
  std::vector<float> h;        // (Nr, D) residual after attention (sequential block only)
  std::vector<float> rstd2;    // (Nr)
  MlpActs mlp;                 // (N, d_ff/tp)
  MoeActs moe;
};

// Scratch buffers reused by every layer.
struct Scratch {
  std::vector<float> normed, proj, act, dact, dgate, dup, dnormed, dq, dk, dv, dattn;
  std::vector<float> permuted, dpermuted, dexpert_out, dweights, dprobs, router_logits;
  std::vector<float> ffn_out, residual_grad, residual_partial;
  // Tensor parallelism: the gathered (N, D) input of a column-parallel group, the (N, D)
  // partial sums of a row-parallel projection before their reduction, the gathered output
  // gradient, a norm's per-micro-batch weight gradient before its reduction over tp.
  std::vector<float> gathered, dgathered, norm_grad, reduced, tp_recv, tp_tmp;
  std::vector<float> expert_out;  // serving: expert outputs of a dispatch
  // Expert parallelism: the experts' outputs and gradients, the shared expert's output while
  // the routed rows are away (the wire buffers are the exchange's, parallel/ep_exchange.h).
  std::vector<float> ep_out, ep_grad, ep_back, ep_shared;
  std::vector<float> expert_grads;  // parallel.expert_tp false: a layer's expert gradients
  // Context parallelism: a key/value block held and arriving ([k | v]), a block's attention
  // output and lse before the merge, a dK/dV accumulator held and arriving.
  std::vector<float> cp_kv[2], cp_out, cp_lse, cp_grad[2];
  std::vector<float> cp_piece[2];  // one query piece's attention output and lse
};

// One GEMM applied to a range of rows (model/tp_comm.cc): forward y = x W^T with W (out, in),
// or an input gradient dx += dy W. x null means the rows a gather just delivered.
struct RowGemm {
  const float* x = nullptr;  // (N, in), or (N, out) for an input gradient
  const float* w = nullptr;  // (out, in)
  int64_t in = 0, out = 0;
  bool input_grad = false;
  float* y = nullptr;  // gather only: the destination, (N, out) or (N, in) for an input gradient
};

struct Dims {
  int64_t B = 0, T = 0, N = 0;
  int64_t Nr = 0;  // rows of the residual stream on this rank: N, or N / tp with SP
};

// This rank's part of a tensor-parallel model (tp = 1: everything, and no communication).
struct TpState {
  comm::Communicator* comm = nullptr;  // null when tp = 1
  int size = 1, rank = 0;
  bool sequence_parallel = false;      // only with size > 1
  int64_t heads = 0, kv_heads = 0;     // local query and key/value heads
  int64_t d_ff = 0, shared_d_ff = 0;   // local hidden widths (the dense MLP's, the shared one's)
  int64_t expert_d_ff = 0;             // a routed expert's local width: d_ff, or d_ff / tp
  // parallel.expert_tp false under tp: whole experts, each tp rank running its token share.
  bool expert_tokens_split = false;
  parallel::VocabShard vocab;
  int64_t vocab_rows = 0;              // real vocabulary rows held (embedding, lm_head)
  bool active() const { return size > 1; }
  // The first failed collective; the rest of the pass is skipped and it is returned.
  Status error;
  // Chunking of the overlapped collectives and where their time is counted and traced.
  parallel::TpOverlap overlap;
  parallel::CommStats stats;
  // Runs a blocking tp collective (or an op made of them), counted as fully exposed
  // (parallel::tp_blocking into overlap.stats, which is &stats).
  Status blocking(const char* op, uint64_t bytes, const std::function<Status()>& run);
};

// A weight-gradient GEMM dW += dy^T x held back for the zero-bubble schedule's W pass, with
// copies of its operands (the scratch buffers they came from are reused by the next layer).
struct DeferredGemm {
  size_t param = kNoParam;
  std::vector<float> x, dy;  // (n, in), (n, out)
  int64_t n = 0, in = 0, out = 0;
};

// Everything one micro-batch's forward keeps for its backward: per layer (LayerActs), the
// output layer's inputs and the logits, which hold d(loss)/d(logits) once the loss ran. With
// pipeline parallelism several micro-batches are in flight on a stage, each with its own.
struct PassActs {
  std::vector<LayerActs> acts;
  // final_normed is (Nr, D); final_input its gathered (N, D) form (the same buffer's data
  // without tp), which the lm_head reads.
  std::vector<float> final_x, final_rstd, final_normed, final_gathered, logits, token_loss;
  const float* final_input = nullptr;
  Dims d;
  std::vector<int32_t> inputs;  // the first stage's token ids, for the embedding's gradient
  // Document masking: per token (B, T) its document id and its position in the document.
  std::vector<int32_t> doc;
  std::vector<int64_t> doc_pos;
  // Under cp with document masking: every cp rank's tokens' document ids, (B, T) each.
  std::vector<std::vector<int32_t>> cp_doc;
  float aux_grad = 0;           // d(objective)/d(each layer's aux loss)
  float z_grad = 0;             // d(objective)/d(each layer's router z-loss)
  double z_sum = 0;             // the forward's router z-losses, summed over its layers
};

// Expert parallelism: this rank's experts of every MoE layer and its end of the ep group's
// exchange of the routed rows (parallel/ep_exchange.h: the group, the options, the flights, the
// wire buffers, the first error and the statistics that take_ep_comm_stats reads). The model
// plans which rows travel in which chunk (model/ep_comm.cc). ep = 1: every expert, no
// communication.
struct EpState : parallel::ExpertExchange {
  int64_t first_expert = 0;  // rank * E / ep
};

// Context parallelism: the cp group this rank's attention rings over (model/cp_attention.cc;
// the ring's transfers, first error and statistics are parallel/cp_ring.h's). Each rank holds
// T / cp tokens of every sequence (parallel/cp_layout.h). cp = 1: none.
using CpState = parallel::CpRing;

// The global index of every local token for each cp rank, for (B, T) local micro-batches:
// index[r] is (B, T), rank r's tokens' positions in the whole sequence, row after row.
struct CpLayout {
  int64_t B = 0, T = 0;
  std::vector<std::vector<int64_t>> index;
};

// The state of one forward_cached pass between its stages (model/inference.cc): what must
// survive while a MoE layer's tokens are away at the experts, so several passes (micro-batches)
// can be in flight at once. Scratch buffers are not part of it: a stage uses them only until it
// returns.
struct CachedPassState {
  const PagedKvCache* cache = nullptr;
  std::vector<int32_t> ids;
  // Per token: its absolute position, its sequence's block table and the first position it
  // attends to (0 without document masking, else its document's start), as paged attention
  // takes them; and its rotary position (pos, or with per-document positions pos - its
  // document's start).
  std::vector<ops::PagedQuery> slots;
  std::vector<int64_t> rope_pos;
  std::vector<int64_t> last_rows;  // rows given logits: each chunk's last (all_logits: every)
  size_t layer = 0;                // the next layer to run, or the one awaiting its experts
  size_t layers_total = 0;
  bool awaiting_experts = false;
  std::vector<float> x;       // (N, D) the residual stream entering `layer`
  std::vector<float> h;       // (N, D) x after attention (+ x itself in the parallel block)
  std::vector<float> normed;  // (N, D) the FFN's input
  MoeActs moe;                // routing of the layer awaiting its experts
  std::vector<float> dispatch;  // (N * k, D) normed rows grouped by expert
  std::vector<float> ffn_out;   // (N, D)
  MlpActs shared;
};

struct Transformer::Impl {
  // The device's op set (ops/backend.h) every block and layer calls; the host's for now.
  ops::Backend* be = &ops::cpu_backend();
  config::ModelConfig cfg;
  std::vector<Parameter> params;
  size_t embed = kNoParam, final_norm = kNoParam, lm_head = kNoParam;  // lm_head == embed if tied
  std::vector<LayerIndex> layers;
  ops::RopeTable rope;
  DocumentMask documents;

  TpState tp;
  EpState ep;
  CpState cp;
  CpLayout cp_layout;
  double attention_s = 0;  // in the attention itself (with cp its ring), since the last take
  // Routed load since the last take_moe_load: per local layer, assignments each expert took
  // and assignments dropped by the capacity.
  std::vector<std::vector<int64_t>> load_routed;
  std::vector<int64_t> load_dropped;
  std::vector<std::vector<int64_t>> load_chosen;  // per layer, before any capacity drop
  bool recomputing = false;  // inside parallel.recompute=full's second forward of a layer
  // Pipeline parallelism: this chunk's layers are model layers [chunk.first_layer,
  // chunk.first_layer + layers.size()); the embedding is held by the first stage, the final
  // norm, lm_head and loss by the last (with tied embeddings, its own copy of the embedding as
  // lm_head). Both without pipeline parallelism.
  PipelineChunk chunk;  // layers resolved to the count held
  config::Recompute recompute = config::Recompute::kNone;
  PassActs pass;   // the micro-batch being computed
  LayerActs work;  // the working slot of recomputed layers (parallel.recompute)
  // Pipeline stages: the passes of micro-batches between their forward and backward, by
  // micro-batch; spare ones keep their buffers for reuse, so steady state allocates nothing.
  std::map<int, PassActs> in_flight;
  std::vector<PassActs> spare_passes;
  // Zero-bubble: the weight-gradient GEMMs of micro-batches whose W pass has not run yet.
  std::map<int, std::vector<DeferredGemm>> pending_weight;
  std::vector<DeferredGemm>* defer_into = nullptr;  // set during a backward that defers
  Scratch scratch;
  MlpActs scratch_experts;  // gate/up of experts run for serving (no backward follows)

  int64_t head_dim() const { return cfg.d_model / cfg.n_heads; }
  bool is_moe() const { return cfg.moe.num_experts > 0; }
  float* w(size_t i) { return params[i].value.data<float>(); }
  float* g(size_t i) { return params[i].grad.data<float>(); }
  ops::AttentionShape attention_shape(const Dims& d) const;
  // The attention's mask for the pass: positions 0..T-1 of each row, with the rows' document
  // ids under document masking.
  ops::AttentionMask attention_mask() const;
  // Rotary embeddings of (N, heads, hd) rows at their positions in the row, or in their
  // document under per-document positions; inverse: the backward rotation.
  void rotate(float* x, int64_t heads, const Dims& d, bool inverse) const;
  // Fills pass.doc / pass.doc_pos from the (B, T) inputs when document masking is on. Under
  // cp from the whole sequences (the cp group's tokens gathered, collective over cp), and
  // pass.cp_doc with every cp rank's document ids.
  void set_documents(const int32_t* inputs, const Dims& d);
  // Context parallelism (model/cp_attention.cc): cp_layout for (B, T) local micro-batches;
  // the ring attention of the local queries against every rank's keys and values, forward
  // (into a.attn, a.lse) and backward (accumulating dq, dk, dv); the mask of the local
  // queries against rank `source`'s keys.
  void set_cp_layout(const Dims& d);
  void cp_attention_forward(AttnActs& a, const Dims& d);
  void cp_attention_backward(const AttnActs& a, const float* dout, float* dq, float* dk,
                             float* dv, const Dims& d);
  ops::AttentionMask cp_mask(int source) const;

  // The activations of layer l's internals (everything but x) and of its attention: per layer,
  // or the shared working slot when parallel.recompute recomputes them.
  LayerActs& layer_acts(size_t l);
  AttnActs& attn_acts(size_t l);

  // Tensor-parallel communication (model/tp_comm.cc), each the identity without tp. The
  // GEMMs at the edge of a collective are handed to it as RowGemms, so that under
  // parallel.tp_overlap it runs them chunk by chunk while the next chunk moves.
  //
  // The (N, width) form of the rows (Nr, width): all-gathered with SP (into buf), `local`
  // itself otherwise. Each gemm (x null: the gathered rows) is applied to every row into its y.
  const float* gather_rows(const float* local, int64_t width, const Dims& d,
                           std::vector<float>& buf, std::initializer_list<RowGemm> gemms = {});
  // out (Nr, width) =, or += with accumulate, this rank's rows of the sum over tp of
  // addend (N, width; may be null) + every gemm's rows (all-reduce, or reduce-scatter with SP).
  // addend may alias out.
  void reduce_rows(std::initializer_list<RowGemm> gemms, const float* addend, float* out,
                   int64_t width, const Dims& d, bool accumulate);
  // The norm-weight gradient of this micro-batch, summed over tp under SP (each rank saw its
  // rows), added into parameter `param`'s gradient. `grad` is scratch of d_model floats.
  void reduce_norm_grad(size_t param, std::vector<float>& grad);
  // The gradient buffer a norm's backward accumulates into: the parameter's own gradient, or
  // a zeroed scratch buffer that reduce_norm_grad sums over tp.
  float* norm_grad_buffer(size_t param);
  // All-reduce SUM over tp in place (no-op without tp).
  void allreduce_tp(float* data, int64_t count);

  // Forward over this chunk's layers into pass.final_x and, on the last stage, into
  // pass.logits (N, V / tp); returns the summed aux loss of its MoE layers. The first stage
  // embeds `inputs`; another reads x_in (Nr, D). The backward needs `pass` as it is left.
  double forward(const int32_t* inputs, const float* x_in, const Dims& d);
  // The weight gradient dW += dy^T x of parameter `param` (x: (n, in), dy: (n, out)), or
  // queued with copies of both when a zero-bubble backward defers it (defer_into).
  void weight_grad(size_t param, const float* x, const float* dy, int64_t n, int64_t in,
                   int64_t out);
  // The cross-entropy of the forward's logits against `targets` (transformer.cc).
  Status loss(const int32_t* targets, const Dims& d, float grad_scale, bool write_grad);
  // Backpropagates through this chunk, accumulating into grads: from dlogits (already in
  // pass.logits) on the last stage, else from dout (Nr, D), the gradient of its output. The
  // first stage ends in the embedding's gradient; another writes d(input) into din (Nr, D).
  void backward(const float* dout, float* din, const Dims& d, const BackwardHooks* hooks);
  // Inference over chunks already validated (model/inference.cc), in stages: begin_pass embeds
  // the tokens; pass_to_experts runs layers until a MoE layer's tokens are dispatched to experts
  // (or to the end); pass_apply_experts finishes that layer from the experts' outputs (N*k, D);
  // pass_logits writes (chunks, V), each chunk's last token.
  void begin_pass(CachedPassState& p, std::span<const CachedChunk> chunks,
                  const PagedKvCache& cache);
  void pass_to_experts(CachedPassState& p, const std::function<void()>& poll);
  void pass_apply_experts(CachedPassState& p, const float* expert_out);
  void pass_logits(CachedPassState& p, float* logits);
  void finish_layer(CachedPassState& p);
  // The MoE FFN split where the experts may run on another rank (model/compute.cc).
  void moe_dispatch(MoeActs& m, const LayerIndex& li, const float* x, std::vector<float>& xp,
                    int64_t n, bool capacity);
  // Adds a training forward's routing of layer `li` to the load (per-expert assignments kept,
  // assignments dropped).
  void record_load(const LayerIndex& li, const ops::MoeRouting& routing);
  void experts_forward(const LayerIndex& li, MlpActs& acts, const float* xp,
                       const int64_t* offsets, float* yp);
  void moe_combine(const MoeActs& m, const LayerIndex& li, const float* x, const float* yp,
                   float* out, MlpActs& shared, int64_t n);
  // Expert parallelism (model/ep_comm.cc): cuts m.routing's tokens into chunks, counts the
  // rows of each (peer, chunk, local expert) into m.ep and exchanges the counts over the ep
  // group (ep.plan). The round trips themselves are ep.round_trip (parallel/ep_exchange.h).
  void ep_plan(MoeActs& m);
  // One chunk's experts, forward and backward, under expert parallelism (model/compute.cc).
  void ep_experts_forward(const LayerIndex& li, MoeActs& m, int c, float* y);
  void ep_experts_backward(const LayerIndex& li, MoeActs& m, int c, const float* dy, float* dxp);
  double moe_aux_loss(MoeActs& m);
  // parallel.expert_tp false: sums a layer's expert weight gradients of this micro-batch
  // (buffer, as the backward wrote them) over tp and adds them to the gradients.
  void commit_expert_grads(const LayerIndex& li, std::vector<float>& buffer);
  void local_experts_backward(const LayerIndex& li, MoeActs& m, const float* x, const float* dyp,
                              float* dx, int64_t n);

  // The linear layers of the whole-rows paths (model/blocks/mlp.cc): inside a serving pass
  // (ServingScope) through cached_linear_hook when it answers for `param` (serving's quantized
  // weights), else the f32 weight. Training passes of the same model never ask the hook.
  void linear(size_t param, const float* x, float* y, int64_t n, int64_t in, int64_t out);
  // Linear layers that read the same x (n, in): one call of the hook when it answers for
  // every one of them, else linear() each.
  struct SameInputLinear {
    size_t param;
    float* y;
    int64_t out;
  };
  void linears(std::span<const SameInputLinear> layers, const float* x, int64_t n, int64_t in);
  // The SwiGLU MLP over whole rows (model/blocks/mlp.cc): the dense FFN of cached passes and
  // the shared expert. Forward through linear(); backward accumulates dx and the weights'
  // gradients (weight_grad).
  void mlp_forward(const MlpIndex& m, int64_t d_ff, MlpActs& acts, const float* x, float* out,
                   int64_t rows, bool accumulate);
  void mlp_backward(const MlpIndex& m, int64_t d_ff, const MlpActs& acts, const float* x,
                    const float* dout, float* dx, int64_t rows);
  CachedLinear cached_linear_hook;
  bool serving = false;  // inside a cached pass: linear() may answer through the hook
  // Marks the cached pass's stages (model/inference.cc) for their duration.
  struct ServingScope {
    explicit ServingScope(Impl& impl) : impl(impl), was(impl.serving) { impl.serving = true; }
    ~ServingScope() { impl.serving = was; }
    ServingScope(const ServingScope&) = delete;
    ServingScope& operator=(const ServingScope&) = delete;
    Impl& impl;
    bool was;
  };
  // Indexed by parameter: whether the hook answers for it (its f32 value may be released).
  std::vector<bool> cached_linear_answers;

 private:
  // Rotary embeddings on q, k and the attention itself (a.q, a.k, a.v -> a.attn, a.lse).
  void attention_core(AttnActs& a, const Dims& d);
  // The projections of the layer's column-parallel group reading the normed input: q, k, v
  // (into at) and, for a dense FFN that reads the same input, gate and up (into mlp).
  RowGemm q_gemm(const LayerIndex& li, AttnActs& at, const Dims& d);
  RowGemm k_gemm(const LayerIndex& li, AttnActs& at, const Dims& d);
  RowGemm v_gemm(const LayerIndex& li, AttnActs& at, const Dims& d);
  // Backward halves of the layer (model/layers.cc): each turns d(output) into the partial
  // input gradient its reduction sums, accumulating the weight gradients.
  // input: the gathered normed input (N, D); dout: the gathered d(layer output) (N, D).
  void attention_backward(AttnActs& at, const LayerIndex& li, const float* input,
                          const float* dout, const Dims& d);
  void dense_ffn_backward(MlpActs& acts, const LayerIndex& li, const float* input,
                          const float* dout, const Dims& d);
  double moe_forward(MoeActs& m, const LayerIndex& li, const float* x, float* out, int64_t n);
  void moe_backward(MoeActs& m, const LayerIndex& li, const float* x, const float* dout,
                    float* dx, float aux_grad, int64_t n);
  double layer_forward(size_t l, const float* x_in, float* x_out, const Dims& d);
  // The embedding lookup into acts[0].x and, in the backward, its gradient from dres.
  void embed_forward(const int32_t* inputs, const Dims& d);
  void embed_backward(const int32_t* inputs, const float* dres, const Dims& d);
  void layer_backward(size_t l, float* dres, float aux_grad, const Dims& d);
  void notify_layer(size_t l, const BackwardHooks* hooks) const;
};

// "model.d_ff (96)": a config key and its value, as the refusals name them
// (model/config_rules.cc).
std::string key_value(const char* key, int64_t value);

// Builds m's parameter table for its config and shard (model/parameter_table.cc): allocates and
// initializes the values (kRandom) or only allocates them (kToLoad); with `specs`, lists the
// table into it instead, allocating nothing.
Status build_parameters(Transformer::Impl& m, uint64_t seed, ParameterValues values,
                        std::vector<ParameterSpec>* specs = nullptr);

}  // namespace ms::model
