// Continuous batching (infer/engine.h): a FCFS waiting queue, admission by free batch slots and
// KV blocks, one forward_cached per step over prefill and decode chunks together, sampling per
// sequence, and the finish rules (stop token, stop string, max_tokens, context length). With a
// draft model, the draft's proposals for each decoding sequence ride in that same forward (on
// this rank or through a StepForward) and infer/speculative.h's rule decides how many of them
// are kept.
#include "infer/engine.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>

#include "infer/speculative.h"

namespace ms::infer {

struct Engine::Sequence {
  const Request* request = nullptr;
  size_t index = 0;             // position in the request list
  std::vector<int32_t> blocks;  // block table
  std::vector<int32_t> feed;    // tokens of the next chunk
  int64_t position = 0;         // position of feed[0]: the target cache holds positions before it
  int64_t doc_start = 0;        // document masking: where the document of feed[0] began
  Completion completion;
  bool done = false;
  // With a draft model: its block table (as long as `blocks`), every token so far (prompt and
  // generated; the last one is feed[0]), and how many leading positions of `history` the
  // draft's cache holds.
  std::vector<int32_t> draft_blocks;
  std::vector<int32_t> history;
  int64_t draft_position = 0;
};

// One round's proposal for one sequence: k tokens and, when sampling, the draft's
// distribution (k x vocab) each was drawn from.
struct Engine::Proposal {
  std::vector<int32_t> tokens;
  std::vector<double> q;
};

double EngineStats::acceptance_rate() const {
  return draft_proposed > 0 ? static_cast<double>(draft_accepted) / draft_proposed : 0.0;
}

double EngineStats::tokens_per_round() const {
  return decode_rounds > 0 ? static_cast<double>(decode_generated) / decode_rounds : 0.0;
}

Engine::Engine(model::Transformer& model, const data::Tokenizer* tokenizer,
               const EngineOptions& options, StepForward* forward, model::Transformer* draft)
    : model_(model),
      tokenizer_(tokenizer),
      options_(options),
      forward_(forward),
      cache_(model.config(), options.kv_blocks, options.block_size),
      draft_(draft) {
  if (draft_ != nullptr) {
    draft_cache_ =
        std::make_unique<KvCache>(draft->config(), options.kv_blocks, options.block_size);
  }
}

namespace {

// Floats of the KV cache (K and V of every layer: blocks x block size x kv heads x head dim);
// nullopt when the product overflows.
std::optional<int64_t> kv_cache_floats(const config::ModelConfig& c, const EngineOptions& o) {
  int64_t n = 2;
  for (int64_t factor : {c.n_layers, o.kv_blocks, o.block_size, c.n_kv_heads, c.d_model / c.n_heads}) {
    if (__builtin_mul_overflow(n, factor, &n)) return std::nullopt;
  }
  return n;
}

std::string kv_cache_sizes(const config::ModelConfig& c, const EngineOptions& o) {
  return "kv_blocks " + std::to_string(o.kv_blocks) + " x block_size " +
         std::to_string(o.block_size) + " positions over model.n_layers " +
         std::to_string(c.n_layers) + " with " + std::to_string(c.n_kv_heads) +
         " KV heads of size " + std::to_string(c.d_model / c.n_heads);
}

Status kv_cache_too_large(const config::ModelConfig& c, const EngineOptions& o, int64_t floats) {
  return Unavailable("out of memory allocating the KV cache of " + std::to_string(floats * 4) +
                     " bytes (" + kv_cache_sizes(c, o) + "); lower --kv-blocks");
}

// Why `draft` cannot speculate for `target`, or OK.
Status check_draft(const model::Transformer& target, const model::Transformer& draft,
                   const EngineOptions& options) {
  if (options.draft_tokens < 1) {
    return InvalidArgument("--draft-tokens (" + std::to_string(options.draft_tokens) +
                           ") must be at least 1");
  }
  if (draft.config().vocab_size != target.config().vocab_size) {
    return InvalidArgument("the draft model's vocab_size (" +
                           std::to_string(draft.config().vocab_size) + ") differs from the " +
                           "target's (" + std::to_string(target.config().vocab_size) +
                           "); a draft must share the target's tokenizer");
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(model::Transformer& model,
                                               const data::Tokenizer* tokenizer,
                                               const EngineOptions& options,
                                               StepForward* forward, model::Transformer* draft) {
  if (options.max_batch < 1 || options.kv_blocks < 1 || options.block_size < 1) {
    return InvalidArgument("max_batch (" + std::to_string(options.max_batch) + "), kv_blocks (" +
                           std::to_string(options.kv_blocks) + ") and block_size (" +
                           std::to_string(options.block_size) + ") must all be at least 1");
  }
  if (draft != nullptr) MS_RETURN_IF_ERROR(check_draft(model, *draft, options));
  if (options.drafter != nullptr && (draft != nullptr || options.draft_tokens < 1)) {
    return InvalidArgument("a model-free drafter takes the place of a draft model and needs "
                           "draft_tokens >= 1 (got a draft model: " +
                           std::string(draft != nullptr ? "yes" : "no") + ", draft_tokens " +
                           std::to_string(options.draft_tokens) + ")");
  }
  for (const model::Transformer* m : {&model, draft}) {
    if (m == nullptr) continue;
    const config::ModelConfig& c = m->config();
    const std::optional<int64_t> floats = kv_cache_floats(c, options);
    if (!floats || *floats > std::numeric_limits<int64_t>::max() / 4) {
      return InvalidArgument("the KV cache size overflows: " + kv_cache_sizes(c, options) +
                             "; lower --kv-blocks");
    }
  }
  const config::ModelConfig& c = model.config();
  const int64_t floats = *kv_cache_floats(c, options) +
                         (draft != nullptr ? *kv_cache_floats(draft->config(), options) : 0);
  try {
    return std::unique_ptr<Engine>(new Engine(model, tokenizer, options, forward, draft));
  } catch (const std::bad_alloc&) {
    return kv_cache_too_large(c, options, floats);
  } catch (const std::length_error&) {
    return kv_cache_too_large(c, options, floats);
  }
}

// Why `r` can never be served, or "" when it can.
std::string Engine::refusal(const Request& r) const {
  const config::ModelConfig& c = model_.config();
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  if (n == 0) return "empty prompt";
  if (n >= c.max_seq_len) {
    return "prompt of " + std::to_string(n) + " tokens leaves no room to generate within the " +
           "model's context of " + std::to_string(c.max_seq_len) + " tokens";
  }
  if (r.max_tokens < 1) return "max_tokens must be at least 1";
  for (int32_t t : r.prompt) {
    if (t < 0 || t >= c.vocab_size)
      return "prompt token " + std::to_string(t) + " is outside the vocabulary";
  }
  const int64_t positions = std::min(n + r.max_tokens, c.max_seq_len);
  if (cache_.blocks_for(positions) > options_.kv_blocks) {
    return "needs " + std::to_string(cache_.blocks_for(positions)) + " KV blocks but the cache " +
           "has " + std::to_string(options_.kv_blocks) + "; raise --kv-blocks or lower max_tokens";
  }
  return "";
}

// Takes r into the batch if its blocks are free; false leaves it waiting.
bool Engine::admit(const Request& r, size_t index, std::vector<Sequence>& running) {
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  const int64_t positions = std::min(n + r.max_tokens, model_.config().max_seq_len);
  std::optional<std::vector<int32_t>> blocks =
      cache_.allocator().allocate(cache_.blocks_for(positions));
  if (!blocks) return false;
  Sequence s;
  if (draft_cache_) {
    // Both caches have the same blocks and hand them out in lockstep, so this cannot fail
    // where the target's allocation succeeded; checked all the same.
    std::optional<std::vector<int32_t>> draft_blocks =
        draft_cache_->allocator().allocate(draft_cache_->blocks_for(positions));
    if (!draft_blocks) {
      cache_.allocator().free(*blocks);
      return false;
    }
    s.draft_blocks = std::move(*draft_blocks);
  }
  if (speculating()) s.history = r.prompt;
  s.request = &r;
  s.index = index;
  s.blocks = std::move(*blocks);
  s.feed = r.prompt;
  s.completion.id = r.id;
  s.completion.prompt_tokens = n;
  running.push_back(std::move(s));
  stats_.admitted_at_step[index] = stats_.steps;
  return true;
}

namespace {

// The first occurrence of any stop string in text, or npos.
size_t find_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t first = std::string::npos;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    first = std::min(first, text.find(s));
  }
  return first;
}

}  // namespace

// Records `token` for s, which would be fed at next_position; true when s is finished
// (finish_reason and text then set).
bool Engine::finished(Sequence& s, int32_t token, int64_t next_position) {
  const Request& r = *s.request;
  Completion& c = s.completion;
  const bool eos = options_.stop_at_eos && tokenizer_ != nullptr && token == tokenizer_->eos_id();
  if (eos || std::find(r.stop_tokens.begin(), r.stop_tokens.end(), token) != r.stop_tokens.end()) {
    c.finish_reason = "stop";
  } else {
    c.tokens.push_back(token);
  }
  if (tokenizer_ != nullptr) {
    Result<std::string> text = tokenizer_->decode(c.tokens);
    c.text = text.ok() ? *text : std::string();
    const size_t stop_at = find_stop(c.text, r.stop);
    if (stop_at != std::string::npos) {
      c.text.resize(stop_at);
      c.finish_reason = "stop";
    }
  }
  if (c.finish_reason.empty() && (static_cast<int64_t>(c.tokens.size()) >= r.max_tokens ||
                                  next_position >= model_.config().max_seq_len)) {
    c.finish_reason = "length";
  }
  return !c.finish_reason.empty();
}

namespace {

bool greedy(const SamplingParams& p) { return p.temperature <= 0; }

// Under `mask`, where the document of the token after `before` (a sequence's first tokens)
// began; 0 without document masking.
int64_t document_start(const model::DocumentMask& mask, std::span<const int32_t> before) {
  if (!mask.enabled) return 0;
  return model::next_document_start(before, 0, 0, mask.eod_id);
}

}  // namespace

// Tokens the draft proposes for s this round: draft_tokens, but never so many that the round
// could emit more than max_tokens (which also keeps every write inside the admission
// reservation), write past the target's context, or feed the draft past its own. 0 for a
// sequence still to be prefilled, and without a draft model or drafter.
int64_t Engine::draft_budget(const Sequence& s) const {
  if (!speculating() || s.completion.tokens.empty()) return 0;
  const int64_t generated = static_cast<int64_t>(s.completion.tokens.size());
  const int64_t budget = std::min({options_.draft_tokens, s.request->max_tokens - generated - 1,
                                   model_.config().max_seq_len - 1 - s.position,
                                   draft_ != nullptr ? draft_->config().max_seq_len - s.position
                                                     : options_.draft_tokens});
  return std::max<int64_t>(budget, 0);
}

// Draft pass j feeds every sequence still proposing its latest proposal (pass 0: the tokens
// the draft's cache lacks, up to the last generated one), all sequences in one forward, and
// draws each one's next proposal: the draft's argmax (greedy) or a sample from its
// distribution, kept for the verdict.
Status Engine::propose(const std::vector<Sequence>& running, std::vector<Proposal>& proposals) {
  const int64_t V = model_.config().vocab_size;
  std::vector<int64_t> budget(running.size());
  std::vector<std::vector<int32_t>> text(running.size());  // history, then the proposals
  int64_t passes = 0;
  for (size_t i = 0; i < running.size(); ++i) {
    budget[i] = draft_budget(running[i]);
    passes = std::max(passes, budget[i]);
    if (budget[i] > 0) text[i] = running[i].history;
  }
  const model::DocumentMask& documents = draft_->document_mask();
  for (int64_t j = 0; j < passes; ++j) {
    std::vector<model::CachedChunk> chunks;
    std::vector<size_t> who;
    for (size_t i = 0; i < running.size(); ++i) {
      if (budget[i] <= j) continue;
      const Sequence& s = running[i];
      const int64_t start = j == 0 ? s.draft_position : s.position + j;
      const std::span<const int32_t> all(text[i]);
      chunks.push_back({all.subspan(static_cast<size_t>(start)), start, s.draft_blocks,
                        document_start(documents, all.first(static_cast<size_t>(start)))});
      who.push_back(i);
    }
    MS_ASSIGN_OR_RETURN(Tensor logits, draft_->forward_cached(chunks, draft_cache_->view()));
    ++stats_.draft_passes;
    for (size_t c = 0; c < who.size(); ++c) {
      const size_t i = who[c];
      const float* row = logits.data<float>() + static_cast<int64_t>(c) * V;
      const int64_t last = chunks[c].start + static_cast<int64_t>(chunks[c].tokens.size()) - 1;
      MS_RETURN_IF_ERROR(check_logits(running[i], row, 1, last, "draft model's"));
      const SamplingParams& sampling = running[i].request->sampling;
      Proposal& p = proposals[i];
      int32_t token = 0;
      if (greedy(sampling)) {
        token = argmax(row, V);
      } else {
        const std::vector<double> q = token_distribution(row, V, sampling);
        const int64_t index = static_cast<int64_t>(running[i].completion.tokens.size()) + j;
        token = sample_distribution(q, spec_uniform(sampling, index, SpecDraw::kDraft));
        p.q.insert(p.q.end(), q.begin(), q.end());
      }
      p.tokens.push_back(token);
      text[i].push_back(token);
    }
  }
  return Status::OK();
}

// A model-free drafter's proposals (EngineOptions::drafter) for every decoding sequence, cut
// to its budget and at the first token outside the vocabulary; for a sampled request each
// proposal's q is the point mass at it.
void Engine::propose_from_drafter(const std::vector<Sequence>& running,
                                  std::vector<Proposal>& proposals) const {
  const int64_t V = model_.config().vocab_size;
  for (size_t i = 0; i < running.size(); ++i) {
    const Sequence& s = running[i];
    const int64_t budget = draft_budget(s);
    if (budget == 0) continue;
    std::vector<int32_t> tokens = options_.drafter->propose(*s.request, s.history, budget);
    if (static_cast<int64_t>(tokens.size()) > budget) tokens.resize(static_cast<size_t>(budget));
    const auto outside = std::find_if(tokens.begin(), tokens.end(),
                                      [V](int32_t t) { return t < 0 || t >= V; });
    tokens.erase(outside, tokens.end());
    Proposal& p = proposals[i];
    if (!greedy(s.request->sampling)) {
      p.q.assign(tokens.size() * static_cast<size_t>(V), 0.0);
      for (size_t j = 0; j < tokens.size(); ++j) {
        p.q[j * static_cast<size_t>(V) + static_cast<size_t>(tokens[j])] = 1.0;
      }
    }
    p.tokens = std::move(tokens);
  }
}

// The tokens a round emits for s, from the target's rows (row j scores the token after fed
// position s.position + j) and the proposal: the accepted prefix of the proposal, then the
// target's replacement for the first rejected proposal or, when every one was accepted (or
// none was made), a token sampled from the target's last row. Greedy requests accept while
// the proposal is the target's argmax, so they emit exactly what the target alone would.
// `accepted` counts the kept proposals.
std::vector<int32_t> Engine::decide(const Sequence& s, const float* rows, const Proposal& proposal,
                                    int64_t& accepted) const {
  const int64_t V = model_.config().vocab_size;
  const int64_t k = static_cast<int64_t>(proposal.tokens.size());
  const SamplingParams& sampling = s.request->sampling;
  const int64_t first = static_cast<int64_t>(s.completion.tokens.size());  // completion index
  std::vector<int32_t> out;
  accepted = 0;
  for (int64_t j = 0; j < k; ++j) {
    const float* row = rows + j * V;
    const int32_t x = proposal.tokens[j];
    DraftVerdict verdict;
    if (greedy(sampling)) {
      const int32_t best = argmax(row, V);
      verdict = {best == x, best};
    } else {
      const std::vector<double> p = token_distribution(row, V, sampling);
      const std::span<const double> q(proposal.q.data() + j * V, static_cast<size_t>(V));
      verdict = verify_draft_token(p, q, x, spec_uniform(sampling, first + j, SpecDraw::kAccept),
                                   spec_uniform(sampling, first + j, SpecDraw::kResample));
    }
    out.push_back(verdict.token);
    if (!verdict.accepted) return out;
    ++accepted;
  }
  out.push_back(sample_token(rows + k * V, V, sampling, first + k));
  return out;
}

// Records the round's tokens for s in order until one finishes it; otherwise moves s past the
// fed tokens they make final (its rejected proposals' positions are rolled back: the next
// round overwrites them) and feeds the last token next.
void Engine::record(Sequence& s, const std::vector<int32_t>& tokens, const float* rows,
                    const Proposal& proposal, double now_ms) {
  const int64_t V = model_.config().vocab_size;
  if (s.completion.tokens.empty()) s.completion.ttft_ms = now_ms;
  s.completion.latency_ms = now_ms;
  const int64_t fed = static_cast<int64_t>(s.feed.size());
  for (size_t j = 0; j < tokens.size() && !s.done; ++j) {
    const float* row = rows + static_cast<int64_t>(j) * V;
    if (options_.keep_logits) s.completion.logits.emplace_back(row, row + V);
    s.done = finished(s, tokens[j], s.position + fed + static_cast<int64_t>(j));
  }
  if (s.done) return;
  std::vector<int32_t> final_tokens = s.feed;  // then the accepted proposals
  final_tokens.insert(final_tokens.end(), tokens.begin(), tokens.end() - 1);
  const model::DocumentMask& documents = model_.document_mask();
  if (documents.enabled) {
    s.doc_start =
        model::next_document_start(final_tokens, s.position, s.doc_start, documents.eod_id);
  }
  const int64_t fed_from = s.position;
  s.position += static_cast<int64_t>(final_tokens.size());
  s.feed.assign(1, tokens.back());
  if (!speculating()) return;
  s.history.insert(s.history.end(), tokens.begin(), tokens.end());
  if (draft_ == nullptr) return;
  // The draft's cache got positions fed_from .. fed_from + k - 1 this round; those past the
  // accepted ones are stale.
  if (!proposal.tokens.empty()) {
    s.draft_position =
        std::min(fed_from + static_cast<int64_t>(proposal.tokens.size()), s.position);
  }
}

// Rows (n, vocab) of s's logits, row r scoring the token after position first + r, all finite,
// or the error that ends generation: sampling from them would emit token 0 as if all were well.
Status Engine::check_logits(const Sequence& s, const float* rows, int64_t n, int64_t first,
                            std::string_view whose) const {
  const int64_t bad = first_non_finite_row(rows, n, model_.config().vocab_size);
  if (bad < 0) return Status::OK();
  return FailedPrecondition(
      "request '" + s.request->id + "': the " + std::string(whose) + " logits at position " +
      std::to_string(first + bad) + " (step " + std::to_string(stats_.steps + 1) + ", token " +
      std::to_string(s.completion.tokens.size() + 1) + " of the completion) are not finite "
      "(inf or NaN): its weights or quantization scales overflow float32; nothing was sampled");
}

Status Engine::step(std::vector<Sequence>& running, const Stopwatch& clock) {
  std::vector<Proposal> proposals(running.size());
  if (draft_ != nullptr) MS_RETURN_IF_ERROR(propose(running, proposals));
  if (options_.drafter != nullptr) propose_from_drafter(running, proposals);
  std::vector<std::vector<int32_t>> inputs(running.size());  // feed, then the proposals
  std::vector<model::CachedChunk> chunks;
  for (size_t i = 0; i < running.size(); ++i) {
    const Sequence& s = running[i];
    inputs[i] = s.feed;
    inputs[i].insert(inputs[i].end(), proposals[i].tokens.begin(), proposals[i].tokens.end());
    chunks.push_back({inputs[i], s.position, s.blocks, s.doc_start, !proposals[i].tokens.empty()});
  }
  MS_ASSIGN_OR_RETURN(Tensor logits, forward_ != nullptr
                                         ? forward_->forward(chunks, cache_.view())
                                         : model_.forward_cached(chunks, cache_.view()));
  const int64_t V = model_.config().vocab_size;
  const double now_ms = clock.elapsed_s() * 1e3;
  stats_.max_active = std::max(stats_.max_active, static_cast<int64_t>(running.size()));
  int64_t row = 0;
  for (size_t i = 0; i < running.size(); ++i) {
    Sequence& s = running[i];
    const Proposal& proposal = proposals[i];
    const float* rows = logits.data<float>() + row * V;
    const int64_t fed = static_cast<int64_t>(inputs[i].size());
    const int64_t scored = chunks[i].all_logits ? fed : 1;
    row += scored;
    MS_RETURN_IF_ERROR(check_logits(s, rows, scored, s.position + fed - scored, "model's"));
    const bool prefill = s.completion.tokens.empty();
    (prefill ? stats_.prefill_tokens : stats_.decode_tokens) += fed;
    int64_t accepted = 0;
    const std::vector<int32_t> tokens = decide(s, rows, proposal, accepted);
    if (!prefill) {
      ++stats_.decode_rounds;
      stats_.decode_generated += static_cast<int64_t>(tokens.size());
      stats_.draft_proposed += static_cast<int64_t>(proposal.tokens.size());
      stats_.draft_accepted += accepted;
    }
    record(s, tokens, rows, proposal, now_ms);
  }
  ++stats_.steps;
  return Status::OK();
}

void Engine::free_blocks(Sequence& s) {
  cache_.allocator().free(s.blocks);
  if (draft_cache_) draft_cache_->allocator().free(s.draft_blocks);
}

Result<std::vector<Completion>> Engine::generate(
    const std::vector<Request>& requests, const std::function<void(const Completion&)>& on_done) {
  stats_ = EngineStats{};
  stats_.admitted_at_step.assign(requests.size(), -1);
  std::vector<Completion> out(requests.size());
  std::deque<size_t> waiting;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string why = refusal(requests[i]);
    if (why.empty()) {
      waiting.push_back(i);
      continue;
    }
    out[i] = Completion{requests[i].id,
                        {},
                        "",
                        "error",
                        why,
                        static_cast<int64_t>(requests[i].prompt.size()),
                        0,
                        0,
                        {}};
    if (on_done) on_done(out[i]);
  }
  const Stopwatch clock;
  std::vector<Sequence> running;
  while (!waiting.empty() || !running.empty()) {
    while (!waiting.empty() && static_cast<int64_t>(running.size()) < options_.max_batch &&
           admit(requests[waiting.front()], waiting.front(), running)) {
      waiting.pop_front();
    }
    const Status stepped = step(running, clock);
    if (!stepped.ok()) {
      for (Sequence& s : running) free_blocks(s);
      return stepped;
    }
    for (Sequence& s : running) {
      if (!s.done) continue;
      free_blocks(s);
      out[s.index] = std::move(s.completion);
      if (on_done) on_done(out[s.index]);
    }
    std::erase_if(running, [](const Sequence& s) { return s.done; });
  }
  return out;
}

}  // namespace ms::infer
