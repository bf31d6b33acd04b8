// core/heap_policy.h: after keep_freed_memory_mapped(), a block below 32 MiB comes from the heap
// rather than a mapping of its own, and freeing it leaves the heap its size (no trim), so the
// next such block reuses pages already faulted in. glibc only (mallinfo2, glibc 2.33).
#include "core/heap_policy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ms {
namespace {

TEST(HeapPolicy, LargeBlocksComeFromTheHeapAndStayMapped) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  keep_freed_memory_mapped();
  constexpr size_t kBytes = size_t{20} << 20;  // above glibc's default 128 KiB mmap threshold
  const struct mallinfo2 before = mallinfo2();
  void* block = std::malloc(kBytes);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  const struct mallinfo2 during = mallinfo2();
  EXPECT_EQ(during.hblkhd, before.hblkhd) << "the block was given a mapping of its own";
  EXPECT_GE(during.arena, before.arena + kBytes);
  std::free(block);
  const struct mallinfo2 after = mallinfo2();
  EXPECT_EQ(after.arena, during.arena) << "the heap was trimmed";
  EXPECT_GE(after.fordblks, kBytes);  // free for the next request
#else
  GTEST_SKIP() << "glibc 2.33 or later only";
#endif
}

}  // namespace
}  // namespace ms
