// Disaggregated MoE serving, after MegaScale-Infer: attention ranks hold everything but the
// routed experts (embedding, attention, norms, routers, shared experts, lm_head) plus the KV
// cache of their own sequences, and run the continuous-batching engine; expert ranks hold the
// routed experts, a contiguous block of them each. At every MoE layer an attention rank sends
// each expert rank the rows routed to its experts and receives their outputs: M-to-N
// point-to-point traffic, one message pair per (attention rank, expert rank) that has rows.
//
// Ping-pong: an attention rank splits each step's sequences into m micro-batches. It runs
// micro-batch 0's attention and sends its tokens, then micro-batch 1's while the experts work on
// 0, and so on; a micro-batch's next layer starts as soon as its expert outputs are back. Both
// sides stay busy when the attention time per micro-batch Ta and the expert time Te each cover
// the other side's work and the round trip Tc, which is the paper's m >= 2 (1 + Tc / Tf).
//
// Messages keep one tag per kind and MPI's non-overtaking order: every attention rank sends,
// per step, a control word (micro-batches in the step, or 0 when it has finished) and then, in
// the order (layer, micro-batch), per expert rank the row count of each of its experts and the
// rows; the expert rank answers each with the outputs in the same order. The numbers computed
// are the colocated model's: the same stages of model::Transformer (begin_cached,
// run_to_experts, run_experts, apply_experts), only the experts' matmuls see other rows. A
// speculative-decoding verify chunk (k + 1 positions, all_logits) is k + 1 rows like any
// others to the expert ranks; the attention rank computes a logits row for each position.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "infer/engine.h"
#include "model/transformer.h"

namespace ms::infer {

// Which rank does what: ranks [0, attention) are attention ranks, the rest expert ranks.
struct ServingLayout {
  int world = 1;
  int attention = 1;
  int64_t num_experts = 0;

  // InvalidArgument unless the model is MoE and 1 <= attention < world with no more expert
  // ranks than experts.
  static Result<ServingLayout> create(int world, int attention, int64_t num_experts);
  int expert_ranks() const { return world - attention; }
  bool is_attention(int rank) const { return rank < attention; }
  // Routed experts [first_expert(r), first_expert(r + 1)) live on expert rank r (0-based among
  // the expert ranks, world rank attention + r): contiguous blocks differing by at most one.
  int64_t first_expert(int r) const;
  // The expert rank (0-based) holding expert e.
  int owner(int64_t e) const;
};

// What one rank's side of the pipeline did. Attention ranks: `tokens` dispatched rows; expert
// ranks: rows computed. wait_s is time blocked on the other side (the pipeline's idle time).
struct PipelineStats {
  int64_t steps = 0;          // engine steps (attention) or steps served (experts)
  int64_t micro_batches = 0;  // micro-batch passes through all layers
  int64_t rows = 0;
  double busy_s = 0;
  double wait_s = 0;
  int64_t bytes_sent = 0, bytes_received = 0;
  double idle_fraction() const { return wait_s / std::max(busy_s + wait_s, 1e-12); }
};

// The attention side: a StepForward for the engine that runs every MoE layer's experts on the
// expert ranks. `comm` spans the layout's world; `model` holds at least every non-expert
// parameter. Call finish() once when the engine is done, so the expert ranks can stop.
class RemoteExperts : public StepForward {
 public:
  RemoteExperts(model::Transformer& model, comm::Communicator& comm, const ServingLayout& layout,
                int micro_batches);
  Result<Tensor> forward(std::span<const model::CachedChunk> chunks,
                         const model::PagedKvCache& cache) override;
  Status finish();
  const PipelineStats& stats() const { return stats_; }

 private:
  struct InFlight;
  Status dispatch(InFlight& f);
  Status collect(InFlight& f);
  // Tests every request in flight, so MPI moves their data while this rank computes (large
  // messages need the sender inside MPI); the first error is kept for collect().
  void progress(std::vector<InFlight>& flights);

  model::Transformer& model_;
  comm::Communicator& comm_;
  ServingLayout layout_;
  int micro_batches_;
  PipelineStats stats_;
  Status progress_error_;
};

// The expert side: serves MoE layers for every attention rank until all have called finish().
// `model` holds this rank's experts (ServingLayout::first_expert).
Result<PipelineStats> serve_experts(model::Transformer& model, comm::Communicator& comm,
                                    const ServingLayout& layout);

// Splits chunks into at most m consecutive groups of about equal token counts (every group
// non-empty), so micro-batches cost about the same.
std::vector<std::span<const model::CachedChunk>> split_micro_batches(
    std::span<const model::CachedChunk> chunks, int m);

}  // namespace ms::infer
