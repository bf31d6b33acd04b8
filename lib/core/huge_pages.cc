#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>

namespace ms {
namespace {

constexpr std::align_val_t kSmallAlignment{64};

size_t round_up(size_t bytes, size_t unit) { return (bytes + unit - 1) / unit * unit; }

}  // namespace

void* allocate_streamed(size_t bytes) {
  if (bytes < kHugePageBytes) return ::operator new(bytes, kSmallAlignment);
  const size_t size = round_up(bytes, kHugePageBytes);
  if (size < bytes || size + kHugePageBytes < size) throw std::bad_alloc();
  // Map one huge page more than needed and trim both ends to a 2 MiB boundary: mmap only
  // promises 4 KiB alignment, and a huge page must start on its own boundary.
  const size_t mapped = size + kHugePageBytes;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(start, kHugePageBytes);
  if (aligned > start) munmap(raw, aligned - start);
  const size_t tail = start + mapped - (aligned + size);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size), tail);
  auto* data = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  // Advice only: EINVAL where THP is compiled out leaves ordinary pages, which still work.
  madvise(data, size, MADV_HUGEPAGE);
#endif
  return data;
}

void* allocate_streamed_zeroed(size_t bytes) {
  void* data = allocate_streamed(bytes);
  // A fresh anonymous mapping reads as zeros; only operator new's memory needs clearing.
  if (bytes < kHugePageBytes) std::memset(data, 0, bytes);
  return data;
}

void free_streamed(void* data, size_t bytes) noexcept {
  if (data == nullptr) return;
  if (bytes < kHugePageBytes) {
    ::operator delete(data, kSmallAlignment);
    return;
  }
  munmap(data, round_up(bytes, kHugePageBytes));
}

}  // namespace ms
