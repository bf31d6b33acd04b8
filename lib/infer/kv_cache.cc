// The block free list and the cache arena (infer/kv_cache.h).
#include "infer/kv_cache.h"

#include <algorithm>
#include <cstdlib>

#include "core/logging.h"

namespace ms::infer {

BlockAllocator::BlockAllocator(int64_t num_blocks)
    : num_blocks_(num_blocks), in_use_(static_cast<size_t>(num_blocks), false) {
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks; b-- > 0;) free_.push_back(static_cast<int32_t>(b));
}

std::optional<std::vector<int32_t>> BlockAllocator::allocate(int64_t n) {
  if (n > num_free()) return std::nullopt;
  std::vector<int32_t> blocks;
  blocks.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    blocks.push_back(free_.back());
    free_.pop_back();
    in_use_[blocks.back()] = true;
  }
  return blocks;
}

void BlockAllocator::free(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    if (b < 0 || b >= num_blocks_ || !in_use_[b]) {
      MS_LOG(Error) << "KV block " << b << " freed twice or never allocated";
      std::abort();
    }
    in_use_[b] = false;
    free_.push_back(b);
  }
}

KvCache::KvCache(const config::ModelConfig& model, int64_t num_blocks, int64_t block_size)
    : allocator_(num_blocks) {
  view_.block_size = block_size;
  view_.num_blocks = num_blocks;
  view_.kv_heads = model.n_kv_heads;
  view_.head_dim = model.d_model / model.n_heads;
  const int64_t per_layer = num_blocks * block_size * view_.kv_heads * view_.head_dim;
  const size_t bytes = static_cast<size_t>(2 * model.n_layers * per_layer) * sizeof(float);
  const size_t allocated = std::max<size_t>(bytes, 1);
  storage_ = std::unique_ptr<float[], StreamedFree>(
      static_cast<float*>(allocate_streamed_zeroed(allocated)), StreamedFree{allocated});
  bytes_ = static_cast<int64_t>(bytes);
  for (int64_t l = 0; l < model.n_layers; ++l) {
    view_.k.push_back(storage_.get() + (2 * l) * per_layer);
    view_.v.push_back(storage_.get() + (2 * l + 1) * per_layer);
  }
}

int64_t KvCache::blocks_for(int64_t positions) const {
  return (positions + view_.block_size - 1) / view_.block_size;
}

int64_t KvCache::bytes() const { return bytes_; }

}  // namespace ms::infer
