// Memory for large arrays that a hot loop streams end to end: serving weights read once per
// decode step, the KV cache, the memory-bandwidth probe. Arrays of 2 MiB and more are mapped on
// a 2 MiB boundary and advised MADV_HUGEPAGE, so that Linux backs them with transparent huge
// pages when its setting (/sys/kernel/mm/transparent_hugepage/enabled) is "madvise" or
// "always". Streaming 500 MB through 4 KiB pages walks 120 k page-table entries a pass, which
// costs most under a hypervisor's two-level page tables. With the setting at "never", or on a
// kernel without THP, the memory is ordinary 4 KiB pages and nothing else changes.
// Smaller arrays come from operator new with a 64-byte alignment.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace ms {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` (at least 1) of uninitialized memory, 64-byte aligned, or 2 MiB aligned and advised
// for huge pages when bytes >= kHugePageBytes. Throws std::bad_alloc when memory runs out.
void* allocate_streamed(size_t bytes);
// The same, zero-filled. A mapping's pages come zeroed from the kernel and are not touched here,
// so they are faulted in as they are first used; a small array is cleared.
void* allocate_streamed_zeroed(size_t bytes);
// Releases what allocate_streamed(bytes) or allocate_streamed_zeroed(bytes) returned; `bytes`
// must be the same.
void free_streamed(void* data, size_t bytes) noexcept;

// A unique_ptr deleter for what allocate_streamed(bytes) or allocate_streamed_zeroed(bytes)
// returned.
struct StreamedFree {
  size_t bytes = 0;
  template <class T>
  void operator()(T* p) const noexcept {
    free_streamed(p, bytes);
  }
};

// The same memory as a std::allocator, for vectors.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(allocate_streamed(n == 0 ? 1 : n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { free_streamed(p, n == 0 ? 1 : n * sizeof(T)); }

  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace ms
