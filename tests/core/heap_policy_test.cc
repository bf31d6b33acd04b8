// core/heap_policy.h: after keep_freed_memory_mapped(), a block below 32 MiB comes from the heap
// rather than a mapping of its own, and freeing it leaves the heap its size (no trim), so the
// next such block reuses pages already faulted in. glibc only (mallinfo2, glibc 2.33).
#include "core/heap_policy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ms {
namespace {

TEST(HeapPolicy, LargeBlocksComeFromTheHeapAndStayMapped) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  ASSERT_TRUE(keep_freed_memory_mapped().ok());
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

TEST(HeapPolicy, AValueOtherThanZeroOrOneIsRefusedByName) {
  ASSERT_EQ(setenv("MS_KEEP_FREED_MEMORY", "false", 1), 0);
  const Status status = keep_freed_memory_mapped();
  unsetenv("MS_KEEP_FREED_MEMORY");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("MS_KEEP_FREED_MEMORY must be 0"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("got 'false'"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace ms
