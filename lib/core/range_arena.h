// The bookkeeping of a device memory arena: one range of `capacity` bytes reserved at start
// (one cudaMalloc), carved into blocks on demand and given back without a device call, so a
// training step allocates nothing from the driver. The arena only deals in offsets; the device
// runtime (kernels/cuda_runtime.h) adds them to its base address. Host code, tested on the CPU.
//
// Placement is best fit (the smallest free block that holds the request, the lowest offset on
// ties), and freed blocks merge with free neighbours, so the steady state of a training step,
// which frees and re-requests the same sizes in the same order, lands on the same offsets
// every step. Every block is rounded up to `alignment` bytes (256: what cuBLASLt and vector
// loads want), so offsets stay aligned.
//
// Not thread-safe: the runtime serialises calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace ms {

class RangeArena {
 public:
  static constexpr size_t kDefaultAlignment = 256;

  // `alignment`: a power of two.
  explicit RangeArena(size_t capacity, size_t alignment = kDefaultAlignment);

  // The offset of a free block of at least `bytes` (rounded up to the alignment; 0 bytes take
  // one aligned unit so every allocation has its own offset), or nullopt when no free block is
  // large enough (which may be fragmentation: largest_free() tells).
  std::optional<size_t> allocate(size_t bytes);
  // Gives back the block at `offset`, as allocate returned it. False (and nothing changes) for
  // an offset that is not an allocated block's start.
  bool release(size_t offset);

  size_t capacity() const { return capacity_; }
  size_t alignment() const { return alignment_; }
  // Bytes in allocated blocks now, and the most there have been since construction or the last
  // reset_peak().
  size_t in_use() const { return in_use_; }
  size_t peak() const { return peak_; }
  void reset_peak() { peak_ = in_use_; }
  size_t largest_free() const;
  size_t allocated_blocks() const { return used_.size(); }
  // "in use X of Y (peak Z, largest free block W)" in MiB, for out-of-memory messages.
  std::string describe() const;

 private:
  size_t capacity_;
  size_t alignment_;
  size_t in_use_ = 0;
  size_t peak_ = 0;
  std::map<size_t, size_t> free_by_offset_;           // offset -> size
  std::set<std::pair<size_t, size_t>> free_by_size_;  // (size, offset)
  std::map<size_t, size_t> used_;                     // offset -> size

  void add_free(size_t offset, size_t size);
  void remove_free(std::map<size_t, size_t>::iterator it);
};

}  // namespace ms
