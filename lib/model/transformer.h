// Transformer: the decoder-only language model ms-train trains and ms-infer serves, on the CPU
// in fp32 (docs/model.md). Llama-style blocks: pre-norm RMSNorm, grouped-query attention with
// rotary embeddings (Hugging Face's half-split convention) and an optional sliding window, a
// SwiGLU MLP or a Mixture-of-Experts FFN (softmax router, renormalized top-k, dropless routing,
// load-balancing loss, optional shared expert), a final RMSNorm and an lm_head that may be tied
// to the embedding. The MegaScale parallel block (attention and FFN read the same normed input)
// is an option.
//
// Every parameter is a global tensor named as in Hugging Face Llama/Mixtral checkpoints
// (Qwen2-MoE names for the shared expert) with a ShardSpec saying which slice this rank holds;
// today every rank holds the whole tensor. Work is done on whole micro-batches: every matmul
// multiplies all B*T tokens at once through OpenBLAS, and attention is tiled so no (T x T)
// matrix per head is ever stored. Results are bitwise reproducible run after run: no reduction
// depends on thread timing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/shard_spec.h"
#include "config/run_config.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/inference.h"

namespace ms::model {

// One parameter: a global tensor of which this rank holds the slice described by `shard`
// (today tp = pp = ep = 1, so the whole tensor).
struct Parameter {
  std::string name;                   // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> global_shape;  // Linear weights are (out_features, in_features)
  comm::ShardSpec shard;
  Tensor value;                       // f32, local shard, contiguous
  Tensor grad;                        // f32, same shape as value
  bool weight_decay = true;           // false for norm weights (and biases)
};

struct LossStats {
  double loss = 0;      // mean cross-entropy over the tokens
  double aux_loss = 0;  // MoE load-balancing loss, mean over MoE layers (0 when dense)
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

class Transformer {
 public:
  // Validates `config` (head counts and divisibility, even head size, MoE top_k <= experts,
  // sliding window, shared expert size) with InvalidArgument naming the key and the rule, then
  // initializes every parameter from Philox keyed by (seed, stream_id(name), global element
  // index): normal(0, 0.02) for matrices and embeddings, with output projections (o_proj,
  // down_proj, w2) scaled by 1/sqrt(2 * n_layers); ones for norm weights. Gradients start at 0.
  static Result<std::unique_ptr<Transformer>> create(const config::ModelConfig& config,
                                                     uint64_t seed);

  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  // In a fixed order: embedding, then per layer (norms, attention, FFN), final norm, lm_head.
  std::vector<Parameter>& parameters();
  const std::vector<Parameter>& parameters() const;
  // Index of the parameter named `name`, or NotFound.
  Result<size_t> parameter_index(const std::string& name) const;

  // inputs/targets: (B, T) int32 row-major token ids in [0, vocab_size), 1 <= T <= max_seq_len.
  // Accumulates grad_scale * d(loss + aux_loss_coef * aux_loss)/d(param) into every
  // Parameter::grad (the trainer passes 1 / num_micro_batches) and returns the mean
  // cross-entropy over the B*T tokens and the aux loss. InvalidArgument for bad sizes or token
  // ids (naming the position); gradients are untouched then.
  Result<LossStats> forward_backward(const int32_t* inputs, const int32_t* targets, int64_t B,
                                     int64_t T, float grad_scale,
                                     const BackwardHooks* hooks = nullptr);
  // The same loss without gradients (evaluation).
  Result<LossStats> forward_loss(const int32_t* inputs, const int32_t* targets, int64_t B,
                                 int64_t T);
  // Logits (B, T, vocab_size) f32 (inference, golden tests).
  Result<Tensor> forward_logits(const int32_t* inputs, int64_t B, int64_t T);

  // Inference (model/inference.cc): runs `chunks` (see model/inference.h) through the model,
  // writing their keys and values into `cache`, and returns the logits of each chunk's last
  // token, (chunks.size(), vocab_size) f32. InvalidArgument for an empty chunk, a token outside
  // the vocabulary, positions past model.max_seq_len, a block table too short or naming a block
  // outside the cache, or a cache shaped for another model; the cache is untouched then.
  Result<Tensor> forward_cached(std::span<const CachedChunk> chunks, const PagedKvCache& cache);

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

// The configuration rules create() applies, separately so tools can refuse a config before any
// allocation. InvalidArgument naming the key (e.g. "model.n_kv_heads") and the rule.
Status validate_model_config(const config::ModelConfig& config);

}  // namespace ms::model
