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

#include <array>
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
#include "ops/device_array.h"
#include "ops/moe.h"
#include "ops/paged_attention.h"
#include "ops/rope.h"
#include "parallel/cp_ring.h"
#include "parallel/ep_exchange.h"
#include "parallel/ring_attention.h"
#include "parallel/tp_layout.h"
#include "parallel/tp_overlap.h"
#include "parallel/tp_rows.h"

namespace ms::model {

// Activations and scratch: f32 arrays in the backend's device memory (ops/device_array.h).
using ops::DeviceArray;
using Floats = ops::DeviceArray;

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
  Floats gate, up;  // (rows, d_ff)
};

struct MoeActs {
  Floats probs;    // (N, E)
  Floats lse;      // (N) logsumexp of the router logits (the z-loss)
  Floats weights;  // (N, k)
  ops::MoeRouting routing;
  MlpActs experts;             // (N*k, d_ff), rows grouped by expert; with ep the rows this
                               // rank's experts received
  Floats expert_out;  // (N*k, D) in dispatch order
  MlpActs shared;              // (N, shared_d_ff)
  // Expert parallelism: how this micro-batch's rows were exchanged over the ep group
  // (parallel/ep_exchange.h, plan_routing), kept for the backward's exchanges.
  parallel::EpPlan ep;
  Floats ep_input;  // (received rows, D) in ep.rows' layout
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
  Floats q, k, v;  // (N, H*hd), (N, KV*hd), (N, KV*hd) after RoPE
  Floats attn;     // (N, H*hd) attention output before o_proj
  Floats lse;      // (B, H, T)
};

// What one layer's forward keeps for its backward. Nr is the rows of the residual stream held
// here: N, or N/tp with sequence parallelism; projections and attention always see all N rows.
// x is kept per layer whatever parallel.recompute says; the rest lives in one shared working
// slot under full recomputation, and `attn` under selective recomputation too.
struct LayerActs {
  Floats x;        // (Nr, D) block input
  Floats rstd1;    // (Nr)
  AttnActs attn;
  Floats h;        // (Nr, D) residual after attention (sequential block only)
  Floats rstd2;    // (Nr)
  MlpActs mlp;                 // (N, d_ff/tp)
  MoeActs moe;
};

// Scratch buffers reused by every layer.
struct Scratch {
  Floats normed, proj, act, dact, dgate, dup, dnormed, dq, dk, dv, dattn;
  Floats permuted, dpermuted, dexpert_out, dweights, dprobs, router_logits;
  Floats ffn_out, residual_grad, residual_partial;
  // Tensor parallelism: the gathered (N, D) input of a column-parallel group, the (N, D)
  // partial sums of a row-parallel projection before their reduction, the gathered output
  // gradient, a norm's per-micro-batch weight gradient before its reduction over tp.
  Floats gathered, dgathered, norm_grad, reduced;
  Floats expert_out;  // serving: expert outputs of a dispatch
  // Expert parallelism: the experts' outputs and gradients, the shared expert's output while
  // the routed rows are away (the wire buffers are the exchange's, parallel/ep_exchange.h).
  Floats ep_out, ep_grad, ep_back, ep_shared;
  Floats expert_grads;  // parallel.expert_tp false: a layer's expert gradients
  parallel::RingAttentionBuffers ring;  // context parallelism's ring attention
};

using parallel::RowGemm;

struct Dims {
  int64_t B = 0, T = 0, N = 0;
  int64_t Nr = 0;  // rows of the residual stream on this rank: N, or N / tp with SP
  // n rows held whole here (no batch shape): a cached pass's tokens, a MoE layer's.
  static Dims rows(int64_t n) {
    Dims d;
    d.N = d.Nr = n;
    return d;
  }
};

// This rank's part of a tensor-parallel model (tp = 1: everything, and no communication): the
// group and its row exchanges (parallel/tp_rows.h), and the slice of the model it holds.
struct TpState : parallel::TpGroup {
  int64_t heads = 0, kv_heads = 0;     // local query and key/value heads
  int64_t d_ff = 0, shared_d_ff = 0;   // local hidden widths (the dense MLP's, the shared one's)
  int64_t expert_d_ff = 0;             // a routed expert's local width: d_ff, or d_ff / tp
  // parallel.expert_tp false under tp: whole experts, each tp rank running its token share.
  bool expert_tokens_split = false;
  parallel::VocabShard vocab;
  int64_t vocab_rows = 0;              // real vocabulary rows held (embedding, lm_head)
};

// A weight-gradient GEMM dW += dy^T x held back for the zero-bubble schedule's W pass, with
// copies of its operands (the scratch buffers they came from are reused by the next layer).
struct DeferredGemm {
  size_t param = kNoParam;
  Floats x, dy;  // (n, in), (n, out)
  int64_t n = 0, in = 0, out = 0;
};

// Everything one micro-batch's forward keeps for its backward: per layer (LayerActs), the
// output layer's inputs and the logits, which hold d(loss)/d(logits) once the loss ran. With
// pipeline parallelism several micro-batches are in flight on a stage, each with its own.
struct PassActs {
  std::vector<LayerActs> acts;
  // final_normed is (Nr, D); final_input its gathered (N, D) form (the same buffer's data
  // without tp), which the lm_head reads.
  Floats final_x, final_rstd, final_normed, final_gathered, logits, token_loss;
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
// exchange of the routed rows (parallel/ep_exchange.h: the group, the options, the plan of a
// round trip, the flights, the wire buffers, the first error and the statistics that
// take_ep_comm_stats reads). ep = 1: every expert, no communication.
struct EpState : parallel::ExpertExchange {
  int64_t first_expert = 0;  // rank * E / ep
};

// Context parallelism: the cp group this rank's attention rings over (parallel/ring_attention.h;
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
  Floats x;       // (N, D) the residual stream entering `layer`
  Floats h;       // (N, D) x after attention (+ x itself in the parallel block)
  Floats normed;  // (N, D) the FFN's input
  MoeActs moe;                // routing of the layer awaiting its experts
  Floats dispatch;  // (N * k, D) normed rows grouped by expert
  // The output layer's rows (each chunk's last, or every row), normed, and its rstd.
  Floats last, last_normed, last_rstd, last_gathered;
  Floats logits;  // (chunks, V) before their copy to the host
  Floats ffn_out;   // (N, D)
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
  // A buffer of n elements on the backend's device: its first elements kept and new ones zero
  // (sized; callers overwrite what they read), or all zero (zeroed).
  float* sized(Floats& v, int64_t n) { return v.resize(*be, static_cast<size_t>(n)); }
  float* zeroed(Floats& v, int64_t n) { return v.zeroed(*be, static_cast<size_t>(n)); }
  // ---- Linear layers (model/blocks/linear.cc) ----
  // One projection into y (n, out) of x (n, in): inside a serving pass (ServingScope) through
  // cached_linear_hook when it answers for `param` (serving's quantized weights), else the f32
  // weight. Training passes of the same model never ask the hook.
  void linear(size_t param, const float* x, float* y, int64_t n, int64_t in, int64_t out);
  // Projections that read the same x (n, in): one call of the hook when it answers for every
  // one of them, else linear() each.
  struct SameInputLinear {
    size_t param;
    float* y;
    int64_t out;
  };
  void linears(std::span<const SameInputLinear> layers, const float* x, int64_t n, int64_t in);
  // A projection of the row-parallel side: x (N, in) through `param` to width d_model.
  struct RowLinear {
    size_t param;
    const float* x;
    int64_t in;
  };
  // The column-parallel group reading `local` (Nr, D): its projections into their y (N, out).
  // Without tp, linears() over the rows; with tp the rows are gathered first (with SP, into
  // buf) and each projection runs on each chunk as it arrives (parallel/tp_rows.h). Returns the
  // (N, D) input the projections read.
  const float* project_in(const float* local, const Dims& d, Floats& buf,
                          std::span<const SameInputLinear> outs);
  // out (Nr, D) = addend (N, D; may be null, may alias out) + the sum of the projections,
  // reduced over tp (all-reduce, or reduce-scatter with SP); without tp, linear() each.
  void project_out(std::span<const RowLinear> projections, const float* addend, float* out,
                   const Dims& d);
  // The tp group's bare row exchanges with RowGemms at their edges (the backward's input
  // gradients), bound to this model's backend and rows: parallel::TpGroup's.
  const float* gather_rows(const float* local, int64_t width, const Dims& d,
                           Floats& buf, std::initializer_list<RowGemm> gemms = {}) {
    return tp.gather_rows(*be, local, width, d.N, buf, gemms);
  }
  void reduce_rows(std::initializer_list<RowGemm> gemms, const float* addend, float* out,
                   int64_t width, const Dims& d) {
    tp.reduce_rows(*be, gemms, addend, out, width, d.N, false);
  }
  // The weight gradient dW += dy^T x of parameter `param` (x: (n, in), dy: (n, out)), or
  // queued with copies of both when a zero-bubble backward defers it (defer_into).
  void weight_grad(size_t param, const float* x, const float* dy, int64_t n, int64_t in,
                   int64_t out);

  // ---- RMSNorm (model/blocks/norm.cc) ----
  // x (rows, D) -> out and the rstd the backward reads.
  void norm_forward(size_t param, const float* x, float* out, Floats& rstd,
                    int64_t rows);
  // Accumulates dx (rows, D) from dout, and the weight's gradient: under SP each tp rank saw
  // its rows only, so the micro-batch's weight gradient is summed over tp before it is added.
  void norm_backward(size_t param, const float* x, const Floats& rstd,
                     const float* dout, float* dx, int64_t rows);

  // ---- Attention (model/blocks/attention.cc) ----
  // Keys and values read from a paged cache instead of from the pass itself (cached passes):
  // the cache's layer, the tokens' slots and rotary positions, and a poll between steps.
  struct PagedKeys {
    ops::PagedAttentionShape shape;
    const ops::PagedQuery* slots = nullptr;
    const int64_t* positions = nullptr;
    float* k_cache = nullptr;
    float* v_cache = nullptr;
    const std::function<void()>* poll = nullptr;
  };
  // normed (Nr, D) -> q, k, v (and `also`: other projections reading the same input, the
  // parallel block's gate and up) through project_in, rotary embeddings, and the attention of
  // the queries against the pass's keys (in the batch, or around the cp ring) or, with `paged`,
  // the cache's (after storing this pass's k and v there) into a.attn (and a.lse). Returns the
  // gathered (N, D) input.
  const float* attention_forward(const LayerIndex& li, AttnActs& a, const float* normed,
                                 const Dims& d, std::span<const SameInputLinear> also = {},
                                 const PagedKeys* paged = nullptr);
  // out (Nr, D) = addend + o(a.attn) + `also` (the parallel block's down projection), through
  // project_out.
  void attention_output(const LayerIndex& li, const AttnActs& a, const float* addend, float* out,
                        const Dims& d, std::span<const RowLinear> also = {});
  // With scratch.dattn holding d(attention output) (N, H*hd): the weight gradients of o, q, k,
  // v and, in scratch.dq/dk/dv, the gradients the input-gradient GEMMs of the reduction read.
  // input: the gathered normed input (N, D).
  void attention_backward(AttnActs& at, const LayerIndex& li, const float* input,
                          const float* dout, const Dims& d);
  ops::AttentionShape attention_shape(const Dims& d) const;
  // The attention's mask for the pass: positions 0..T-1 of each row, with the rows' document
  // ids under document masking; under cp, the local queries against rank `source`'s keys.
  ops::AttentionMask attention_mask() const;
  ops::AttentionMask cp_mask(int source) const;
  // Rotary embeddings of (N, heads, hd) rows at their positions in the row, or in their
  // document under per-document positions; inverse: the backward rotation.
  void rotate(float* x, int64_t heads, const Dims& d, bool inverse) const;
  // Fills pass.doc / pass.doc_pos from the (B, T) inputs when document masking is on. Under
  // cp from the whole sequences (the cp group's tokens gathered, collective over cp), and
  // pass.cp_doc with every cp rank's document ids.
  void set_documents(const int32_t* inputs, const Dims& d);
  // cp_layout for (B, T) local micro-batches.
  void set_cp_layout(const Dims& d);

  // ---- The SwiGLU MLP (model/blocks/mlp.cc) ----
  // Its gate and up projections of x into acts (rows, d_ff), as linears that read one input.
  std::array<SameInputLinear, 2> mlp_gate_up(const MlpIndex& m, int64_t d_ff, MlpActs& acts,
                                             int64_t rows);
  // silu(gate) * up into scratch.act, which the down projection reads.
  float* mlp_activation(const MlpActs& acts, int64_t d_ff, int64_t rows);
  // x -> out = down(silu(gate(x)) * up(x)). kExchanged: x is this rank's residual rows
  // (Nr, D) and the projections meet the tp group (project_in / project_out: the dense FFN).
  // kWhole, kWholeAdd: x and out are d.N rows held here, out written or added to, and a tp
  // slice's partial sums are left to the caller (the shared expert).
  enum class MlpRows { kExchanged, kWhole, kWholeAdd };
  void mlp_forward(const MlpIndex& m, int64_t d_ff, MlpActs& acts, const float* x, float* out,
                   const Dims& d, MlpRows rows);
  // Accumulates dx: (rows, D) and the three weight gradients from dout: (rows, D). The SwiGLU
  // product is recomputed from the kept gate and up projections rather than stored.
  void mlp_backward(const MlpIndex& m, int64_t d_ff, const MlpActs& acts, const float* x,
                    const float* dout, float* dx, int64_t rows);
  // The tensor-parallel dense FFN's backward half: with scratch.dact holding d(SwiGLU product)
  // (N, F), the weight gradients of down, gate and up, and in scratch.dgate/dup what the
  // input-gradient GEMMs of the reduction read.
  void dense_ffn_backward(MlpActs& acts, const LayerIndex& li, const float* input,
                          const float* dout, const Dims& d);

  // ---- Mixture of experts (model/blocks/moe.cc) ----
  // x: (n, D) -> out: (n, D): route, run every expert over its tokens (here, or at the ranks
  // holding them under ep), combine with the routing weights, add the shared expert. Returns
  // this layer's load-balancing loss.
  double moe_forward(MoeActs& m, const LayerIndex& li, const float* x, float* out, int64_t n);
  void moe_backward(MoeActs& m, const LayerIndex& li, const float* x, const float* dout,
                    float* dx, float aux_grad, int64_t n);
  // The MoE FFN split where the experts may run on another rank (cached passes): routing and
  // dispatch, then the combine.
  void moe_dispatch(MoeActs& m, const LayerIndex& li, const float* x, Floats& xp,
                    int64_t n, bool capacity);
  void moe_combine(const MoeActs& m, const LayerIndex& li, const float* x, const float* yp,
                   float* out, MlpActs& shared, int64_t n);
  // Rows grouped by expert, expert e's at [offsets[e], offsets[e + 1]) (offsets[0] may be the
  // first row of a chunk) -> their outputs, one SwiGLU MLP per expert over its rows.
  void experts_forward(const LayerIndex& li, MlpActs& acts, const float* xp,
                       const int64_t* offsets, float* yp,
                       const std::function<void()>& poll = {});
  // Adds a training forward's routing of layer `li` to the load (per-expert assignments kept,
  // assignments dropped).
  void record_load(const LayerIndex& li, const ops::MoeRouting& routing);
  double moe_aux_loss(MoeActs& m);
  // The weights of a layer's experts held here and where their gradients go (blocks/moe.cc).
  struct ExpertGrads;

  // ---- Embedding and output layer (model/blocks/embedding.cc) ----
  // The embedding lookup into acts[0].x and, in the backward, its gradient from dres
  // (vocabulary-parallel under tp).
  void embed_forward(const int32_t* inputs, const Dims& d);
  void embed_backward(const int32_t* inputs, const float* dres, const Dims& d);
  // The output layer, training's and serving's: x (Nr, D) -> the final norm into normed (its
  // rstd kept), and logits (N, vocab_rows) = lm_head over the normed rows, gathered under SP.
  // Returns the (N, D) rows lm_head read.
  const float* output_forward(const float* x, const Dims& d, Floats& normed,
                              Floats& rstd, Floats& gathered,
                              float* logits);
  // Training's backward of output_forward over pass: from d(logits) (in pass.logits) into
  // dres (Nr, D), accumulating the final norm's and lm_head's gradients.
  void output_backward(float* dres, const Dims& d);
  // The cross-entropy of the forward's logits against `targets` (transformer.cc).
  Status loss(const int32_t* targets, const Dims& d, float grad_scale, bool write_grad);

  // ---- The stack (model/layers.cc) ----
  // The activations of layer l's internals (everything but x) and of its attention: per layer,
  // or the shared working slot when parallel.recompute recomputes them.
  LayerActs& layer_acts(size_t l);
  AttnActs& attn_acts(size_t l);
  // Forward over this chunk's layers into pass.final_x and, on the last stage, into
  // pass.logits (N, V / tp); returns the summed aux loss of its MoE layers. The first stage
  // embeds `inputs`; another reads x_in (Nr, D). The backward needs `pass` as it is left.
  double forward(const int32_t* inputs, const float* x_in, const Dims& d);
  // Backpropagates through this chunk, accumulating into grads: from dlogits (already in
  // pass.logits) on the last stage, else from dout (Nr, D), the gradient of its output. The
  // first stage ends in the embedding's gradient; another writes d(input) into din (Nr, D).
  void backward(const float* dout, float* din, const Dims& d, const BackwardHooks* hooks);

  // ---- Cached passes (model/inference.cc) ----
  // Inference over chunks already validated, in stages: begin_pass embeds the tokens;
  // pass_to_experts runs layers until a MoE layer's tokens are dispatched to experts (or to the
  // end); pass_apply_experts finishes that layer from the experts' outputs (N*k, D);
  // pass_logits writes p.logits (chunks, V), each chunk's last token.
  void begin_pass(CachedPassState& p, std::span<const CachedChunk> chunks,
                  const PagedKvCache& cache);
  void pass_to_experts(CachedPassState& p, const std::function<void()>& poll);
  void pass_apply_experts(CachedPassState& p, const float* expert_out);
  void pass_logits(CachedPassState& p);
  void finish_layer(CachedPassState& p);
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
  void attention_core(AttnActs& a, const Dims& d, const PagedKeys* paged);
  // Under parallel.expert_tp false: sums a layer's expert weight gradients of this micro-batch
  // (buffer, as the backward wrote them) over tp and adds them to the gradients.
  void commit_expert_grads(const LayerIndex& li, Floats& buffer);
  // The experts' backward over rows grouped as experts_forward's: from dyp, the gradients of
  // their outputs, into dxp (those rows zeroed first) and the weight gradients in `grads`.
  void experts_backward(const LayerIndex& li, const MlpActs& acts, const float* xp,
                        const int64_t* offsets, const float* dyp, float* dxp,
                        const ExpertGrads& grads, int64_t total_rows,
                        const std::function<void()>& poll);
  void local_experts_backward(const LayerIndex& li, MoeActs& m, const float* x, const float* dyp,
                              float* dx, int64_t n);
  double layer_forward(size_t l, const float* x_in, float* x_out, const Dims& d);
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
