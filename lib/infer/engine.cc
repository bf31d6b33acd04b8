// Continuous batching (infer/engine.h): a FCFS waiting queue, admission by free batch slots and
// KV blocks, one forward_cached per step over prefill and decode chunks together, sampling per
// sequence, and the finish rules (stop token, stop string, max_tokens, context length).
#include "infer/engine.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>

namespace ms::infer {

struct Engine::Sequence {
  const Request* request = nullptr;
  size_t index = 0;             // position in the request list
  std::vector<int32_t> blocks;  // block table
  std::vector<int32_t> feed;    // tokens of the next chunk
  int64_t position = 0;         // position of feed[0]
  int64_t doc_start = 0;        // document masking: where the document of feed[0] began
  Completion completion;
  bool done = false;
};

Engine::Engine(model::Transformer& model, const data::Tokenizer* tokenizer,
               const EngineOptions& options, StepForward* forward)
    : model_(model),
      tokenizer_(tokenizer),
      options_(options),
      forward_(forward),
      cache_(model.config(), options.kv_blocks, options.block_size) {}

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

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(model::Transformer& model,
                                               const data::Tokenizer* tokenizer,
                                               const EngineOptions& options,
                                               StepForward* forward) {
  if (options.max_batch < 1 || options.kv_blocks < 1 || options.block_size < 1) {
    return InvalidArgument("max_batch (" + std::to_string(options.max_batch) + "), kv_blocks (" +
                           std::to_string(options.kv_blocks) + ") and block_size (" +
                           std::to_string(options.block_size) + ") must all be at least 1");
  }
  const config::ModelConfig& c = model.config();
  const std::optional<int64_t> floats = kv_cache_floats(c, options);
  if (!floats || *floats > std::numeric_limits<int64_t>::max() / 4) {
    return InvalidArgument("the KV cache size overflows: " + kv_cache_sizes(c, options) +
                           "; lower --kv-blocks");
  }
  try {
    return std::unique_ptr<Engine>(new Engine(model, tokenizer, options, forward));
  } catch (const std::bad_alloc&) {
    return kv_cache_too_large(c, options, *floats);
  } catch (const std::length_error&) {
    return kv_cache_too_large(c, options, *floats);
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

// Records `token` for s; true when s is finished (finish_reason and text then set).
bool Engine::finished(Sequence& s, int32_t token) {
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
  const int64_t next_position = s.position + static_cast<int64_t>(s.feed.size());
  if (c.finish_reason.empty() && (static_cast<int64_t>(c.tokens.size()) >= r.max_tokens ||
                                  next_position >= model_.config().max_seq_len)) {
    c.finish_reason = "length";
  }
  return !c.finish_reason.empty();
}

Status Engine::step(std::vector<Sequence>& running, const Stopwatch& clock) {
  std::vector<model::CachedChunk> chunks;
  for (const Sequence& s : running) {
    chunks.push_back({s.feed, s.position, s.blocks, s.doc_start});
  }
  MS_ASSIGN_OR_RETURN(Tensor logits, forward_ != nullptr
                                         ? forward_->forward(chunks, cache_.view())
                                         : model_.forward_cached(chunks, cache_.view()));
  const int64_t V = model_.config().vocab_size;
  const double now_ms = clock.elapsed_s() * 1e3;
  stats_.max_active = std::max(stats_.max_active, static_cast<int64_t>(running.size()));
  for (size_t i = 0; i < running.size(); ++i) {
    Sequence& s = running[i];
    const float* row = logits.data<float>() + static_cast<int64_t>(i) * V;
    (s.completion.tokens.empty() ? stats_.prefill_tokens : stats_.decode_tokens) +=
        static_cast<int64_t>(s.feed.size());
    if (options_.keep_logits) s.completion.logits.emplace_back(row, row + V);
    const int64_t index = static_cast<int64_t>(s.completion.tokens.size());
    const int32_t token = sample_token(row, V, s.request->sampling, index);
    if (index == 0) s.completion.ttft_ms = now_ms;
    s.completion.latency_ms = now_ms;
    s.done = finished(s, token);
    const model::DocumentMask& documents = model_.document_mask();
    if (documents.enabled) {
      s.doc_start = model::next_document_start(s.feed, s.position, s.doc_start, documents.eod_id);
    }
    s.position += static_cast<int64_t>(s.feed.size());
    s.feed.assign(1, token);
  }
  ++stats_.steps;
  return Status::OK();
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
    MS_RETURN_IF_ERROR(step(running, clock));
    for (Sequence& s : running) {
      if (!s.done) continue;
      cache_.allocator().free(s.blocks);
      out[s.index] = std::move(s.completion);
      if (on_done) on_done(out[s.index]);
    }
    std::erase_if(running, [](const Sequence& s) { return s.done; });
  }
  return out;
}

}  // namespace ms::infer
