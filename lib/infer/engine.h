// The serving engine: continuous batching over the paged KV cache (infer/kv_cache.h) with the
// training model's forward_cached. Each step runs one forward over every active sequence: the
// whole prompt of a sequence admitted this step (prefill) and one token of every other
// (decode), so the matmuls see all of them at once. Requests wait in arrival order and join
// between steps when a batch slot and their KV blocks are free; a finished sequence leaves at
// once and its blocks go back to the free list.
//
// Admission reserves the blocks for prompt + max_tokens positions, so a running sequence never
// runs out of cache and nothing is ever preempted; a request whose reservation exceeds the
// whole cache, or whose prompt does not fit the context, is refused with a reason while the
// others are served.
//
// With a draft model or a model-free drafter (TokenDrafter below) the proposals are scored the
// same way; a drafter costs no forward. With a draft model (speculative decoding,
// infer/speculative.h) each step of a decoding
// sequence is a round: the draft, over its own paged cache, proposes up to draft_tokens tokens
// one forward at a time (batched over every decoding sequence), and the target scores the
// sequence's last token and the proposals in the same single forward as the other sequences'
// chunks. The accepted prefix plus one token from the target are emitted; the rejected
// positions are rolled back by moving each sequence's cached length back (their keys and values
// are overwritten before anything reads them). Rounds never write past the admission
// reservation: a round proposes at most max_tokens - generated - 1 tokens. The target's forward
// may be a StepForward (disaggregated serving: the experts on other ranks) since a verify chunk
// is one more chunk of the step; the draft always runs here, over its own cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "infer/kv_cache.h"
#include "infer/sampler.h"
#include "model/transformer.h"

namespace ms::infer {

struct Request {
  std::string id;
  std::vector<int32_t> prompt;  // token ids, at least one
  int64_t max_tokens = 16;      // tokens to generate at most
  SamplingParams sampling;
  std::vector<std::string> stop;     // stop strings (need a tokenizer); the text ends before one
  std::vector<int32_t> stop_tokens;  // besides the tokenizer's end-of-text token
};

struct Completion {
  std::string id;
  std::vector<int32_t> tokens;  // generated ids (a stop token is not included)
  std::string text;             // decoded tokens, cut before a stop string
  std::string finish_reason;    // "stop", "length", or "error" (see `error`)
  std::string error;            // why a request was refused
  int64_t prompt_tokens = 0;
  double ttft_ms = 0;                      // from the start of generate() to the first token
  double latency_ms = 0;                   // from the start of generate() to the last token
  std::vector<std::vector<float>> logits;  // per generated token, when keep_logits
};

// Model-free drafting for speculative decoding: proposes the tokens a sequence is expected to
// continue with from what the drafter has seen (the prompt itself, earlier completions of the
// same prompt), without a forward of its own. A proposal is a point mass, so the acceptance rule
// (speculative.h, with q one-hot at the proposed token) keeps a sampled request's tokens
// distributed exactly as the model alone samples them, and a greedy request's tokens identical.
class TokenDrafter {
 public:
  virtual ~TokenDrafter() = default;
  // Up to k tokens to follow `history`: the request's prompt and every token generated so far.
  virtual std::vector<int32_t> propose(const Request& request, std::span<const int32_t> history,
                                       int64_t k) = 0;
};

struct EngineOptions {
  int64_t max_batch = 16;    // sequences in one step at most
  int64_t kv_blocks = 256;   // blocks in the KV cache
  int64_t block_size = 16;   // token positions per block
  bool stop_at_eos = true;   // the tokenizer's end-of-text token ends a sequence
  bool keep_logits = false;  // keep each step's logits in the completion (tests)
  int64_t draft_tokens = 4;  // k: tokens the draft model proposes per round (with a draft)
  // Model-free proposals instead of a draft model (null: none); must outlive the engine.
  // draft_tokens bounds each round's proposal as with a draft.
  TokenDrafter* drafter = nullptr;
};

// How one step's chunks go through the model. The engine's own is forward_cached on this rank;
// infer/disaggregated.h's sends each MoE layer's tokens to expert ranks.
class StepForward {
 public:
  virtual ~StepForward() = default;
  // Logits, as forward_cached: a row for each chunk's last token, or for every token of a chunk
  // with all_logits (speculative verification), in chunk order; (rows, vocab_size).
  virtual Result<Tensor> forward(std::span<const model::CachedChunk> chunks,
                                 const model::PagedKvCache& cache) = 0;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  int64_t max_active = 0;                 // most sequences in one step
  std::vector<int64_t> admitted_at_step;  // per request, the step it joined (-1: refused)
  // A decode round is one sequence's share of a target forward after its prefill; it emits
  // one token without a draft, up to draft_tokens + 1 with one.
  int64_t decode_rounds = 0;
  int64_t decode_generated = 0;  // tokens the rounds emitted (a stop token included)
  int64_t draft_passes = 0;      // forwards of the draft model
  int64_t draft_proposed = 0, draft_accepted = 0;

  // Accepted draft tokens over proposed ones (0 when none were proposed).
  double acceptance_rate() const;
  // Tokens emitted per decode round: 1 without a draft.
  double tokens_per_round() const;
};

class Engine {
 public:
  // `model` and `tokenizer` (may be null: no text, no stop strings) must outlive the engine, as
  // must `forward` when given (null: forward_cached here), and `draft` (null: no speculative
  // decoding; it may be `model` itself, and runs wholly on this rank whatever `forward` is).
  // InvalidArgument when an option is not positive, and with a draft: draft_tokens < 1 or a
  // vocabulary size other than the target's; with options.drafter: a draft model too, or
  // draft_tokens < 1.
  static Result<std::unique_ptr<Engine>> create(model::Transformer& model,
                                                const data::Tokenizer* tokenizer,
                                                const EngineOptions& options,
                                                StepForward* forward = nullptr,
                                                model::Transformer* draft = nullptr);

  // Serves every request to the end and returns their completions in request order.
  // on_done, when set, is called as each request finishes (progress). Per-request problems are
  // reported in Completion::error; an error of the model itself is returned.
  Result<std::vector<Completion>> generate(
      const std::vector<Request>& requests,
      const std::function<void(const Completion&)>& on_done = {});

  const EngineStats& stats() const { return stats_; }
  const KvCache& cache() const { return cache_; }
  // The draft model's cache (as many blocks as the target's), or null without a draft.
  const KvCache* draft_cache() const { return draft_cache_.get(); }

 private:
  struct Sequence;
  struct Proposal;
  Engine(model::Transformer& model, const data::Tokenizer* tokenizer, const EngineOptions& options,
         StepForward* forward, model::Transformer* draft);
  std::string refusal(const Request& r) const;
  bool admit(const Request& r, size_t index, std::vector<Sequence>& running);
  Status step(std::vector<Sequence>& running, const Stopwatch& clock);
  Status check_logits(const Sequence& s, const float* rows, int64_t n, int64_t first,
                      std::string_view whose) const;
  int64_t draft_budget(const Sequence& s) const;
  bool speculating() const { return draft_ != nullptr || options_.drafter != nullptr; }
  Status propose(const std::vector<Sequence>& running, std::vector<Proposal>& proposals);
  void propose_from_drafter(const std::vector<Sequence>& running,
                            std::vector<Proposal>& proposals) const;
  std::vector<int32_t> decide(const Sequence& s, const float* rows, const Proposal& proposal,
                              int64_t& accepted) const;
  void record(Sequence& s, const std::vector<int32_t>& tokens, const float* rows,
              const Proposal& proposal, double now_ms);
  bool finished(Sequence& s, int32_t token, int64_t next_position);
  void free_blocks(Sequence& s);

  model::Transformer& model_;
  const data::Tokenizer* tokenizer_;
  EngineOptions options_;
  StepForward* forward_;  // null: model_.forward_cached
  KvCache cache_;
  model::Transformer* draft_;              // null: no speculative decoding
  std::unique_ptr<KvCache> draft_cache_;  // with draft_
  EngineStats stats_;
};

}  // namespace ms::infer
