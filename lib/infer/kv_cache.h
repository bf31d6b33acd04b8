// The key/value cache of the serving engine: one arena of fixed-size blocks (block_size token
// positions each, every layer's keys and values) handed to sequences from a free list, as in
// vLLM's PagedAttention. A sequence holds a block table (the ids of its blocks in position
// order), so memory is never fragmented: any free block serves any sequence, and a finished
// sequence's blocks return to the list for the next request at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "config/run_config.h"
#include "core/huge_pages.h"
#include "model/inference.h"

namespace ms::infer {

// The free list of block ids 0 .. num_blocks-1. Freed blocks are reused last-in first-out, so a
// request that follows a finished one gets its (cache-warm) blocks.
class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t num_blocks);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  // n block ids, or nullopt (and nothing taken) when fewer than n are free.
  std::optional<std::vector<int32_t>> allocate(int64_t n);
  // Returns blocks to the free list. Each id must have come from allocate() and not been freed
  // since (checked: a double free or a foreign id aborts, as it would corrupt other sequences).
  void free(const std::vector<int32_t>& blocks);

 private:
  int64_t num_blocks_;
  std::vector<int32_t> free_;
  std::vector<bool> in_use_;
};

// The arena: per layer, keys and values of shape (num_blocks, kv_heads, block_size, head_dim).
class KvCache {
 public:
  // Zero-filled; owns the memory the view points into (hence not copyable).
  KvCache(const config::ModelConfig& model, int64_t num_blocks, int64_t block_size);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t block_size() const { return view_.block_size; }
  // Blocks needed to hold `positions` token positions.
  int64_t blocks_for(int64_t positions) const;
  BlockAllocator& allocator() { return allocator_; }
  const BlockAllocator& allocator() const { return allocator_; }
  const model::PagedKvCache& view() const { return view_; }
  // Bytes of the arena (keys and values of every layer).
  int64_t bytes() const;

 private:
  // Huge-page backed (every decode step's attention streams the live blocks) and zero-filled
  // by the kernel as pages are first used, so a large cache costs nothing until it fills.
  std::unique_ptr<float[], StreamedFree> storage_;
  int64_t bytes_ = 0;
  model::PagedKvCache view_;
  BlockAllocator allocator_;
};

}  // namespace ms::infer
