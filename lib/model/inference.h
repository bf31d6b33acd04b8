// The inference view of the Transformer: a key/value cache kept in fixed-size blocks (paged, as
// in vLLM's PagedAttention) that the caller owns, and chunks of tokens from several sequences
// that go through the model together. Transformer::forward_cached runs every projection of all
// chunks' tokens as one matmul (the same weights and operators as training, model/blocks/),
// writes each token's keys and values into its sequence's blocks, and attends each token over
// its own sequence's cached positions. A chunk is a whole prompt (prefill), one new token
// (decode), or several new tokens after cached ones (a speculative-decoding verify pass,
// which wants the logits of every position: CachedChunk::all_logits); they may share one call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "ops/backend.h"

namespace ms::model {

// Keys and values of every layer in blocks of block_size positions. Owned by the caller
// (lib/infer's KvCache); the model only reads and writes through these pointers.
struct PagedKvCache {
  int64_t block_size = 16;
  int64_t num_blocks = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  // Per layer: (num_blocks, kv_heads, block_size, head_dim) f32. Within a block each kv head's
  // positions are contiguous, so attention over one kv head reads its keys and values as a
  // stream the hardware prefetchers follow (with the positions outermost, consecutive positions
  // of a head lay kv_heads * head_dim floats apart, 4 KiB at 8 x 128, a stride they do not).
  std::vector<float*> k, v;
};

// Tokens at positions start .. start + tokens.size() - 1 of one sequence. Position p lives in
// block blocks[p / block_size], slot p % block_size; positions before `start` must already be
// in the cache. Under document masking (Transformer::set_document_mask) doc_start is where the
// document of tokens[0] began (0 <= doc_start <= start: just past the last end-of-document
// token before `start`, model/documents.h's next_document_start): tokens attend from there
// on, or from just past an end-of-document token inside the chunk, and with per-document
// positions their rotary position counts from there. Ignored otherwise. With all_logits the
// pass returns a logits row for every token of the chunk (in order) instead of for its last
// token only.
struct CachedChunk {
  std::span<const int32_t> tokens;
  int64_t start = 0;
  std::span<const int32_t> blocks;
  int64_t doc_start = 0;
  bool all_logits = false;
};

// One output of a call to a CachedLinear: y: (n, out) for parameters()[param_index].
struct CachedLinearOut {
  size_t param_index = 0;
  float* y = nullptr;
};

// A replacement for the f32 weights of the cached forward's linear layers, installed by the
// serving side (lib/infer/serving_weights.h keeps quantized copies): computes
// y = x: (n, in) @ W^T for every out on the model's backend `be` (ops/backend.h: its quantized
// linears, on the device x and y live on) and returns true, or returns false to leave them to
// their f32 weights. The outs of one call read the same x: q, k and v together, and gate and up,
// when the hook answers for each of them (Transformer::set_cached_linear), else one layer a
// call. Called only for Transformer::cached_linear_parameters(), possibly from several passes
// in turn but never concurrently.
using CachedLinear = std::function<bool(ops::Backend& be, std::span<const CachedLinearOut> outs,
                                        const float* x, int64_t n)>;

// One forward_cached pass split at each MoE layer's experts (Transformer::begin_cached), so the
// experts can run on other ranks while this rank works on another pass (disaggregated serving,
// infer/disaggregated.h). Created by Transformer::begin_cached and advanced only by that model;
// the chunks' block tables and the cache must outlive it.
struct CachedPassState;  // model/model_impl.h
class CachedPass {
 public:
  CachedPass();
  ~CachedPass();
  CachedPass(CachedPass&&) noexcept;
  CachedPass& operator=(CachedPass&&) noexcept;

  int64_t tokens() const;  // N, every chunk's tokens
  // The layer that runs next, or whose tokens are waiting for their experts.
  size_t layer() const;
  bool awaiting_experts() const;
  bool finished() const;  // every layer has run; the logits are ready
  // While awaiting_experts: the FFN inputs (N * top_k, d_model) grouped by expert, expert e's
  // rows being [offsets[e], offsets[e + 1]); offsets has num_experts + 1 entries.
  std::span<const float> dispatch_rows() const;
  std::span<const int64_t> dispatch_offsets() const;

 private:
  friend class Transformer;
  std::unique_ptr<CachedPassState> s_;
};

}  // namespace ms::model
