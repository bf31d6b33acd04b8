// Serving on every rank of an mpirun job, for ms-infer generate and bench. Colocated: every
// rank loads the whole model and serves every world-th request (data-parallel replicas).
// Disaggregated (MoE, attention_ranks > 0): the first attention_ranks ranks load everything but
// the routed experts and serve every attention_ranks-th request through RemoteExperts; the
// others load only their block of experts and run serve_experts (infer/disaggregated.h). A
// speculative-decoding draft is loaded whole by every rank that runs the engine (all of them
// when colocated, the attention ranks when disaggregated).
// Rank 0 collects every completion, in request order, and every rank's report.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "infer/disaggregated.h"
#include "infer/engine.h"
#include "infer/model_loader.h"
#include "infer/serving_weights.h"

namespace ms::infer {

struct ServeOptions {
  EngineOptions engine;     // engine.draft_tokens: k of speculative decoding
  std::string draft_model;  // speculative decoding's draft: a model directory or checkpoint
  int attention_ranks = 0;  // 0: colocated
  int micro_batches = 2;    // ping-pong micro-batches per step (disaggregated)
  WeightOptions weights;    // the format the linear weights are served in
};

// One rank's part, as rank 0 receives it.
struct RankReport {
  std::string role;          // "colocated", "attention" or "experts"
  int64_t weight_bytes = 0;  // parameter bytes the rank holds
  int64_t requests = 0;      // requests it served (attention and colocated ranks)
  int64_t prefill_tokens = 0, decode_tokens = 0, steps = 0;
  // Speculative decoding (EngineStats): zero without a draft.
  int64_t decode_rounds = 0, decode_generated = 0, draft_passes = 0;
  int64_t draft_proposed = 0, draft_accepted = 0;
  PipelineStats pipeline;    // disaggregated only
};

struct ServeResult {
  std::vector<Completion> completions;  // rank 0: every request in request order
  std::vector<RankReport> ranks;        // rank 0: index = world rank
  double seconds = 0;                   // from the common start until every rank finished
};

// The parameters this rank needs for `options` (every one when colocated).
ParameterFilter serving_filter(const ServeOptions& options, int rank, int world);

// Loads this rank's part of the model (infer/model_loader.h's load_model with serving_filter),
// converting its linear weights to options.weights as they are read (logged).
// InvalidArgument for negative attention ranks, fewer than one micro-batch, or a layout the
// model cannot be served with (ServingLayout::create). Collective over `comm`: a rank that
// cannot load fails every rank with its error (comm::agree).
Result<LoadedModel> load_for_serving(const std::string& model_dir, const std::string& checkpoint,
                                     const ServeOptions& options, comm::Communicator& comm);

// Loads options.draft_model, the draft of speculative decoding, whole on every rank that runs
// the engine (every rank colocated, the attention ranks disaggregated; an expert rank gets an
// empty LoadedModel, as it never sees the draft): a directory holding config.json is read as a
// Hugging Face model, anything else as a training checkpoint (load_model), and its linear
// weights are converted as the target's. InvalidArgument, on every rank, when the draft's
// vocabulary size or tokenizer differs from `target`'s. Collective like load_for_serving.
Result<LoadedModel> load_draft_for_serving(const ServeOptions& options, const LoadedModel& target,
                                           comm::Communicator& comm);

// Serves `requests` (identical on every rank) with `loaded` from load_for_serving, and with
// speculative decoding when `draft` (from load_draft_for_serving) is given; disaggregated, the
// target verifies the drafts through the expert ranks like any step. on_done is called
// on this rank as each of its own requests finishes. Every rank must call it.
Result<ServeResult> serve(LoadedModel& loaded, const std::vector<Request>& requests,
                          const ServeOptions& options, comm::Communicator& comm,
                          const std::function<void(const Completion&)>& on_done = {},
                          LoadedModel* draft = nullptr);

// A few lines for rank 0 to print: the layout, each rank's role, weights, requests and (when
// disaggregated) pipeline idle fraction and traffic, and the token traffic per token.
std::string describe(const ServeResult& result);

// The speculative-decoding line for rank 0 to print, summed over the ranks: k, the acceptance
// rate (accepted draft tokens over proposed), tokens per target forward per sequence and the
// draft's passes.
std::string describe_speculation(const ServeResult& result, int64_t draft_tokens);

}  // namespace ms::infer
