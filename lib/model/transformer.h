// Transformer: the decoder-only language model ms-train trains and ms-infer serves, on the CPU
// in fp32 (docs/model.md). Llama-style blocks: pre-norm RMSNorm, grouped-query attention with
// rotary embeddings (Hugging Face's half-split convention) and an optional sliding window, a
// SwiGLU MLP or a Mixture-of-Experts FFN (softmax router, renormalized top-k, dropless routing,
// load-balancing loss, optional shared expert), a final RMSNorm and an lm_head that may be tied
// to the embedding. The MegaScale parallel block (attention and FFN read the same normed input)
// is an option.
//
// Every parameter is a global tensor named as in Hugging Face Llama/Mixtral checkpoints
// (Qwen2-MoE names for the shared expert) with a ShardSpec saying which slice this rank holds:
// the whole tensor, or with tensor parallelism (ModelParallel) the slice parallel/tp_shards.h
// assigns to this tp rank, initialized with exactly the values the whole tensor has there. Work is done on whole micro-batches: every matmul
// multiplies all B*T tokens at once through OpenBLAS, and attention is tiled so no (T x T)
// matrix per head is ever stored. Results are bitwise reproducible run after run: no reduction
// depends on thread timing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/shard_spec.h"
#include "config/run_config.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/documents.h"
#include "model/inference.h"
#include "parallel/comm_stats.h"
#include "parallel/tp_overlap.h"

namespace ms::model {

// One parameter: a global tensor of which this rank holds the slice described by `shard`
// (the whole tensor without tensor parallelism; shard.is_replicated() also marks the tensors
// every tp rank holds whole: norm weights and the MoE router).
struct Parameter {
  std::string name;                   // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> global_shape;  // Linear weights are (out_features, in_features)
  comm::ShardSpec shard;
  Tensor value;                       // f32, local shard, contiguous
  Tensor grad;                        // f32, same shape as value
  bool weight_decay = true;           // false for norm weights (and biases)
  // false for model.moe.expert_bias's routing bias: no gradient, no optimizer state; the
  // trainer moves it (update_expert_bias).
  bool trainable = true;
};

struct LossStats {
  double loss = 0;      // mean cross-entropy over the tokens
  double aux_loss = 0;  // MoE load-balancing loss, mean over MoE layers (0 when dense)
  double z_loss = 0;    // MoE router z-loss, mean over MoE layers (0 when dense)
  int64_t tokens = 0;   // B * T
};

// Called during backward. on_grad_ready(i) fires as soon as parameters()[i].grad is final for
// this micro-batch (reverse layer order; a tied embedding fires last), so data parallelism can
// start a bucketed all-reduce early. poll() is called between compute chunks (after each layer's
// backward) so the caller can MPI_Test outstanding requests. Either may be empty. Both run on
// the thread that called forward_backward.
struct BackwardHooks {
  std::function<void(size_t param_index)> on_grad_ready;
  std::function<void()> poll;
};

// Pipeline parallelism (docs/parallel.md): the contiguous layers one model chunk holds. The
// first stage also holds the embedding, the last the final norm, the lm_head and the loss;
// with tied embeddings a last stage that is not also the first holds its own copy of
// model.embed_tokens.weight as its lm_head, whose gradient the trainer sums with the first
// stage's (the embedding group). Parameters keep their global names (model.layers.<global
// index>...). The default is the whole model.
struct PipelineChunk {
  int64_t first_layer = 0;
  int64_t layers = -1;  // -1: to the last layer
  bool first = true;    // virtual stage 0
  bool last = true;     // the last virtual stage
};

// How the model is split across ranks; the default is one process holding everything.
//
// Tensor parallelism (Megatron's placement, docs/parallel.md): q, k, v and gate/up (every
// expert's too) are column-parallel, o and down row-parallel, the embedding and lm_head split
// over the vocabulary padded to a multiple of tp (the vocabulary-parallel cross-entropy never
// gathers the logits), norms and the router replicated. Every tp rank gets the same
// micro-batch and the same loss. All methods below are then collective over `tp`: every rank
// calls them with the same arguments. With sequence parallelism the residual stream between
// blocks holds this rank's N/tp rows (tp must divide B*T).
struct ModelParallel {
  comm::Communicator* tp = nullptr;  // the tensor-parallel group; null or size 1: none
  bool sequence_parallel = true;     // with tp > 1
  config::Recompute recompute = config::Recompute::kNone;
  // With tp > 1: each tp all-gather, reduce-scatter and all-reduce at a GEMM is split into this
  // many row chunks, the GEMM of one chunk running while the next moves (parallel/tp_overlap.h);
  // 1 issues each as one collective. The results do not depend on it beyond fp32 reduction
  // order; a given value is bitwise reproducible.
  int overlap_chunks = 1;
  // Every tp collective as it completes: op, bytes, issue and completion (wall seconds).
  std::function<void(const char* op, uint64_t bytes, double t0, double t1)> on_comm;
  PipelineChunk chunk;
  // Expert parallelism: the ep group (null or size 1: none). Its rank r holds experts
  // [r E / ep, (r + 1) E / ep) of every MoE layer (model.moe.num_experts must be a multiple of
  // ep), and each MoE layer exchanges the routed rows with the group by all-to-all; every rank
  // keeps routing its own tokens. All methods are then collective over ep too.
  comm::Communicator* ep = nullptr;
  bool ep_bf16 = false;  // parallel.ep_comm_dtype bf16: exchange the rows rounded to bf16
  // parallel.ep_overlap_chunks: each MoE layer's round trip is cut into this many token chunks
  // whose all-to-alls overlap the other chunks' expert compute (parallel/ep_exchange.h); 1
  // waits for each all-to-all at once. Results differ only by the experts' weight-gradient summation
  // order; a given value is bitwise reproducible.
  int ep_chunks = 1;
  // Context parallelism: the cp group (null or size 1: none). Each micro-batch passed to the
  // model is then this rank's T / cp tokens of every sequence, chunks r and 2cp-1-r
  // (parallel/cp_layout.h, what the trainer's batches are cut to), at their global positions;
  // attention is a ring over the group and every method is collective over cp too.
  comm::Communicator* cp = nullptr;
  // parallel.expert_tp: with tp > 1, true splits each routed expert's d_ff over tp; false keeps
  // the experts whole on every tp rank, and tp rank r runs them for its share of the tokens
  // (parallel::tp_chunk of the micro-batch), their outputs summed over tp like partial sums and
  // their weight gradients summed over tp.
  bool expert_tp = true;
  // The device the model runs on (ops/backend.h); null: the host's. Parameters are made on the
  // host and moved to the device by whoever owns them (the trainer's distributed optimizer).
  ops::Backend* backend = nullptr;
};

// One micro-batch as a pipeline stage sees it (stage_forward).
struct StageBatch {
  // (B, T) token ids: read by the first stage, and by every stage under document masking
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;  // (B, T) targets: read by the last stage
  int64_t B = 0, T = 0;
  float grad_scale = 1;  // as forward_backward's (1 / micro-batches per step)
  // false: evaluation, no gradients; the micro-batch is not kept for a backward.
  bool backward = true;
};

// How create fills the parameters. kRandom: Philox initialization and zero gradients, for
// training. kToLoad: each value is allocated but not written, so its memory is only committed
// when the caller fills it (a parameter released unread costs nothing), and there are no
// gradients: a model for serving, whose loader writes every value it keeps (norm weights and
// routing biases still start at ones and zeros). Calling backward on such a model is an error
// the caller must not make.
enum class ParameterValues { kRandom, kToLoad };

class Transformer {
 public:
  // Validates `config` (head counts and divisibility, even head size, MoE top_k <= experts,
  // sliding window, shared expert size) with InvalidArgument naming the key and the rule, then
  // initializes every parameter from Philox keyed by (seed, stream_id(name), global element
  // index): normal(0, 0.02) for matrices and embeddings, with output projections (o_proj,
  // down_proj, w2) scaled by 1/sqrt(2 * n_layers); ones for norm weights. Gradients start at 0.
  // With tp > 1 the layout rule (parallel/tp_layout.h's check_tp_model: tp divides the heads,
  // the key/value heads, d_ff and the shared expert's d_ff) is checked first, naming the key.
  static Result<std::unique_ptr<Transformer>> create(
      const config::ModelConfig& config, uint64_t seed, const ModelParallel& parallel = {},
      ParameterValues values = ParameterValues::kRandom);

  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  // In a fixed order: embedding, then per layer (norms, attention, FFN), final norm, lm_head.
  std::vector<Parameter>& parameters();
  const std::vector<Parameter>& parameters() const;
  // Index of the parameter named `name`, or NotFound.
  Result<size_t> parameter_index(const std::string& name) const;

  // inputs/targets: (B, T) int32 row-major token ids in [0, vocab_size), 1 <= T <= max_seq_len.
  // Accumulates grad_scale * d(loss + aux_loss_coef * aux_loss + z_loss_coef * z_loss)/d(param)
  // into every
  // Parameter::grad (the trainer passes 1 / num_micro_batches) and returns the mean
  // cross-entropy over the B*T tokens and the aux loss. InvalidArgument for bad sizes or token
  // ids (naming the position); gradients are untouched then.
  Result<LossStats> forward_backward(const int32_t* inputs, const int32_t* targets, int64_t B,
                                     int64_t T, float grad_scale,
                                     const BackwardHooks* hooks = nullptr);
  // RL post-training (lib/rl, docs/rl.md): forward_backward with a weight per token instead of
  // the uniform grad_scale / (B*T): accumulates d(sum_i token_weights[i] * CE_i)/d(param), CE_i
  // = -log p(targets[i]), so a policy loss whose gradient with respect to token i's log-prob is
  // g_i trains through weights -g_i (0 for prompt and padding positions). The MoE aux and z
  // losses enter with weight 1. token_losses, when not empty, receives every CE_i of this
  // forward (B*T). InvalidArgument for spans of the wrong size, as forward_backward otherwise;
  // FailedPrecondition under context parallelism (a rank holds only part of each sequence).
  Result<LossStats> forward_backward_weighted(const int32_t* inputs, const int32_t* targets,
                                              std::span<const float> token_weights, int64_t B,
                                              int64_t T, std::span<float> token_losses = {},
                                              const BackwardHooks* hooks = nullptr);
  // The same loss without gradients (evaluation).
  Result<LossStats> forward_loss(const int32_t* inputs, const int32_t* targets, int64_t B,
                                 int64_t T);
  // Pipeline stages. forward_backward and forward_loss above need the whole model (first and
  // last stage in one chunk); a chunk of a pipeline runs its micro-batches in two halves, with
  // several micro-batches in flight between them (each keeps its own activations).
  //
  // stage_forward runs micro-batch `mb` through this chunk: the first stage embeds
  // batch.inputs, another reads `input` (stage_activation_elements floats: this rank's (Nr, D)
  // rows of the previous stage's output). A last stage computes the loss against
  // batch.targets and d(grad_scale * loss)/d(logits), and returns the loss; another writes
  // its output into `output` (the same size). LossStats::aux_loss is this chunk's MoE layers'
  // aux losses summed and divided by the model's n_layers, so the chunks' values add up to
  // forward_backward's. InvalidArgument for bad sizes, token ids, a wrongly sized span, or a
  // micro-batch already in flight.
  Result<LossStats> stage_forward(int mb, const StageBatch& batch, std::span<const float> input,
                                  std::span<float> output);
  // The backward of micro-batch `mb` (after its stage_forward): from the gradient of this
  // chunk's output `grad_out` (empty on the last stage), accumulating the weight gradients
  // and, unless this is the first stage, writing the gradient of its input into `grad_in`.
  // With defer_weight_grads (the zero-bubble schedule's B pass) the weight-gradient GEMMs of
  // the linear layers are queued instead and stage_backward_weight(mb) runs them (norm,
  // router, embedding and routed-expert weight gradients are computed here either way).
  // FailedPrecondition when `mb` is not in flight.
  Status stage_backward(int mb, std::span<const float> grad_out, std::span<float> grad_in,
                        bool defer_weight_grads = false, const BackwardHooks* hooks = nullptr);
  Status stage_backward_weight(int mb);
  // The floats of one micro-batch's activation between stages: (Nr, D).
  int64_t stage_activation_elements(int64_t B, int64_t T) const;
  const PipelineChunk& chunk() const;

  // Logits (B, T, vocab_size) f32 (inference, golden tests). FailedPrecondition under tp.
  Result<Tensor> forward_logits(const int32_t* inputs, int64_t B, int64_t T);
  // RL post-training (lib/rl): a forward of (B, T) inputs, then at each flat position of
  // `positions` (in [0, B*T)) the log-probability of targets[position] and the entropy of the
  // next-token distribution, in double. Under tp the logits stay vocabulary-parallel: only
  // (positions)-sized vectors cross tp (parallel::vocab_parallel_log_probs), and every tp rank
  // gets the same bits. InvalidArgument as forward_loss, or for a position outside the batch;
  // FailedPrecondition under cp or on a pipeline chunk.
  struct TokenLogProbs {
    std::vector<double> log_probs, entropy;  // one per position
  };
  Result<TokenLogProbs> forward_log_probs(const int32_t* inputs, const int32_t* targets,
                                          int64_t B, int64_t T,
                                          std::span<const int64_t> positions);

  // The tensor-parallel size and this rank's place in it (1 and 0 without tp).
  int tp_size() const;
  int tp_rank() const;
  // The expert-parallel all-to-alls since the last call, then reset to zero: all-to-alls
  // (collectives; the per-layer count exchanges not included), bytes sent to other ranks, their
  // time in flight (issue to observed completion, summed over all-to-alls, count exchanges
  // included) and the time spent inside their calls instead of computing. Its hidden fraction
  // is an upper bound: completions are seen only between experts.
  parallel::CommStats take_ep_comm_stats();
  // The context-parallel ring's transfers since the last call, in the same terms (collectives:
  // ring hops), then reset to zero.
  parallel::CommStats take_cp_comm_stats();
  // Seconds spent in the attention itself (scores, softmax and values, forward and backward;
  // with cp its ring transfers included) since the last call, then reset to zero.
  double take_attention_seconds();
  // The MoE routing of the forwards since the last call, then reset: per layer this chunk
  // holds (model layer chunk().first_layer + i), the assignments each expert took (after any
  // capacity) and the assignments model.moe.capacity_factor dropped. Empty for a dense model.
  struct MoeLoad {
    std::vector<std::vector<int64_t>> routed;  // [layer][expert]
    std::vector<int64_t> dropped;              // [layer]
    std::vector<std::vector<int64_t>> chosen;  // [layer][expert] before any capacity drop
  };
  MoeLoad take_moe_load();
  // model.moe.expert_bias: moves each MoE layer's routing bias this chunk holds by
  // ops::moe_update_expert_bias from `chosen`, [model layer][expert] assignments chosen over
  // the whole step and every data-parallel rank (all layers of the model; dense layers empty).
  // Every rank holding a layer must pass the same counts, so the copies stay equal. No-op
  // without the bias.
  void update_expert_bias(const std::vector<std::vector<int64_t>>& chosen, double rate);
  // The tp communication since the last call (collectives, bytes, time in flight and time
  // exposed), then reset to zero.
  parallel::CommStats take_tp_comm_stats();
  // Expected peak bytes of activations and working buffers this rank holds during a
  // forward_backward of a (B, T) micro-batch, from the shapes (parallel.recompute and tp
  // included): what ms-train prints at start.
  int64_t activation_bytes(int64_t B, int64_t T) const;

  // Inference (model/inference.cc) needs the whole model on one rank (FailedPrecondition under
  // tp; load a tensor-parallel checkpoint into a single-process model to serve it). It runs `chunks` (see model/inference.h) through the model,
  // writing their keys and values into `cache`, and returns the logits of each chunk's last
  // token, (chunks.size(), vocab_size) f32 (a chunk with all_logits contributes a row for each
  // of its tokens instead, in order). InvalidArgument for an empty chunk, a token outside
  // the vocabulary, positions past model.max_seq_len, a block table too short or naming a block
  // outside the cache, or a cache shaped for another model; the cache is untouched then.
  Result<Tensor> forward_cached(std::span<const CachedChunk> chunks, const PagedKvCache& cache);

  // forward_cached in stages (model/inference.h's CachedPass), for serving a MoE model with its
  // experts on other ranks. begin_cached validates like forward_cached and embeds the tokens;
  // run_to_experts runs layers until a MoE layer's tokens are grouped by expert
  // (pass.awaiting_experts()) or every layer has run (pass.finished()); apply_experts takes the
  // experts' outputs for pass.dispatch_rows(), in the same order, and completes that layer;
  // cached_logits returns (chunks, vocab_size) once finished. forward_cached is exactly these
  // stages with run_experts called here, so both paths compute the same thing.
  Result<CachedPass> begin_cached(std::span<const CachedChunk> chunks, const PagedKvCache& cache);
  // `poll`, when set, is called a few times within each layer (after the projections, after
  // attention), so a caller with messages in flight can let MPI progress them meanwhile.
  void run_to_experts(CachedPass& pass, const std::function<void()>& poll = {});
  // InvalidArgument when the pass is not awaiting experts or expert_out has the wrong size.
  Status apply_experts(CachedPass& pass, std::span<const float> expert_out);
  // FailedPrecondition until pass.finished().
  Result<Tensor> cached_logits(CachedPass& pass);
  // The experts of MoE layer `layer`: x: (offsets.back(), d_model) grouped by expert as in a
  // dispatch (offsets: num_experts + 1 entries) -> y: same shape. Only experts with rows read
  // their weights, so a rank holding some experts serves their rows. InvalidArgument for a
  // dense layer, bad offsets, or rows for an expert whose weights were released.
  Status run_experts(size_t layer, std::span<const int64_t> offsets, const float* x, float* y);

  // For serving: frees every gradient, and the values of the parameters whose index `keep`
  // rejects (a rank that holds only part of the model). A released parameter's value is an
  // empty tensor; the stages above that need it must not be called. Returns the bytes of
  // values still held.
  int64_t release_for_serving(const std::function<bool(size_t param_index)>& keep);
  // The parameters the cached forward multiplies through a CachedLinear when one is set: q, k,
  // v and o of every layer, gate/up/down of dense FFNs, of every routed expert and of the
  // shared expert, and an untied lm_head (the embedding, norms and routers always use their
  // f32 values). Serving may release the f32 values of those the hook answers for. The
  // training forward never calls the hook.
  std::vector<size_t> cached_linear_parameters() const;
  // Installs (or, with an empty function, removes) the cached forward's linear hook. `answered`
  // lists the parameters it answers for, so that an expert whose f32 weights were released
  // behind the hook still counts as held (holds_expert, run_experts).
  void set_cached_linear(CachedLinear linear, std::span<const size_t> answered = {});
  // The MoE layer and routed expert parameters()[param_index] belongs to, if any (the shared
  // expert and the router are not routed experts).
  struct ExpertRef {
    size_t layer = 0;
    int64_t expert = 0;
  };
  std::optional<ExpertRef> routed_expert(size_t param_index) const;
  // Whether MoE layer `layer`'s expert `expert` still holds its weights (as f32 values or
  // behind the CachedLinear hook).
  bool holds_expert(size_t layer, int64_t expert) const;

  // Document masking of packed samples (model/documents.h) for every later forward: training
  // passes derive each token's document from the inputs (a token attends only to its own
  // document; with mask.positions rotary positions restart per document), and cached passes
  // start a sequence's attention at CachedChunk::doc_start and after each end-of-document
  // token. InvalidArgument naming the key when positions is set without enabled, or eod_id is
  // outside the vocabulary.
  Status set_document_mask(const DocumentMask& mask);
  const DocumentMask& document_mask() const;

  // Sets every gradient to 0.
  void zero_grads();
  // Total global elements over all parameters (a tied lm_head is counted once).
  int64_t parameter_count() const;
  // Parameters one token passes through: MoE layers count top_k of their experts (plus the
  // router and shared expert).
  int64_t active_parameter_count() const;
  // Training FLOPs per token at sequence length seq_len: 6 * (active non-embedding matmul
  // parameters + lm_head) + attention, as in docs/model.md.
  double flops_per_token(int64_t seq_len) const;
  const config::ModelConfig& config() const;

  // The implementation (model/model_impl.h); opaque to users of this header.
  struct Impl;

 private:
  explicit Transformer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The parameter table create() would build, in the same order, without allocating it: what
// layout planners and `ms-train --dry-run` list.
struct ParameterSpec {
  std::string name;
  std::vector<int64_t> global_shape;
  bool is_norm = false;  // a norm weight (initialized to ones, no weight decay)
  bool trainable = true;  // false: a routing bias (Parameter::trainable), no optimizer state
};
Result<std::vector<ParameterSpec>> parameter_specs(const config::ModelConfig& config);

// Transformer::activation_bytes and flops_per_token as pure functions of the config and one
// rank's local sizes, for planners that never allocate the model (ms-train plan). The members
// call these, so the planner and the trainer's start-up line use one formula.
struct ActivationDims {
  int tp = 1;
  bool sequence_parallel = false;  // counts only with tp > 1
  int64_t heads = 0, kv_heads = 0;  // local query and key/value heads
  int64_t d_ff = 0, shared_d_ff = 0;  // local hidden widths
  int64_t vocab_rows = 0;  // vocabulary rows this rank holds (lm_head)
  config::Recompute recompute = config::Recompute::kNone;
  int64_t layers = 0;       // layers of this rank's chunk
  bool last_chunk = true;   // holds the output layer and the loss
};
int64_t activation_bytes_of(const config::ModelConfig& config, const ActivationDims& dims,
                            int64_t B, int64_t T);
double training_flops_per_token(const config::ModelConfig& config, int64_t seq_len);

// The configuration rules create() applies, separately so tools can refuse a config before any
// allocation. InvalidArgument naming the key (e.g. "model.n_kv_heads") and the rule.
Status validate_model_config(const config::ModelConfig& config);

}  // namespace ms::model
