#include "core/range_arena.h"

#include <cassert>
#include <cstdio>

namespace ms {
namespace {

std::string mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

RangeArena::RangeArena(size_t capacity, size_t alignment) : alignment_(alignment) {
  assert(alignment != 0 && (alignment & (alignment - 1)) == 0);
  // Only whole aligned units are handed out; a ragged tail could never be used.
  capacity_ = capacity / alignment_ * alignment_;
  if (capacity_ != 0) add_free(0, capacity_);
}

std::optional<size_t> RangeArena::allocate(size_t bytes) {
  // Rounded up without forming bytes + alignment - 1, which wraps near SIZE_MAX.
  const size_t units = bytes == 0 ? 1 : bytes / alignment_ + (bytes % alignment_ != 0);
  if (units > capacity_ / alignment_) return std::nullopt;
  const size_t size = units * alignment_;
  const auto fit = free_by_size_.lower_bound({size, 0});
  if (fit == free_by_size_.end()) return std::nullopt;
  const size_t offset = fit->second;
  const size_t block = fit->first;
  remove_free(free_by_offset_.find(offset));
  if (block > size) add_free(offset + size, block - size);
  used_.emplace(offset, size);
  in_use_ += size;
  if (in_use_ > peak_) peak_ = in_use_;
  return offset;
}

bool RangeArena::release(size_t offset) {
  const auto it = used_.find(offset);
  if (it == used_.end()) return false;
  size_t start = offset;
  size_t size = it->second;
  in_use_ -= size;
  used_.erase(it);
  // Merge with the free neighbours on both sides.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == start + size) {
    size += next->second;
    next = std::next(next);
    remove_free(std::prev(next));
  }
  if (next != free_by_offset_.begin()) {
    const auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      remove_free(prev);
    }
  }
  add_free(start, size);
  return true;
}

size_t RangeArena::largest_free() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

std::string RangeArena::describe() const {
  return "in use " + mib(in_use_) + " of " + mib(capacity_) + " (peak " + mib(peak_) +
         ", largest free block " + mib(largest_free()) + ")";
}

void RangeArena::add_free(size_t offset, size_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void RangeArena::remove_free(std::map<size_t, size_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

}  // namespace ms
