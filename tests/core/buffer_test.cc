// Buffer: aligned, owning, move-only storage.
#include "core/buffer.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include <gtest/gtest.h>

namespace ms {
namespace {

bool is_aligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

TEST(Buffer, DefaultIsEmpty) {
  Buffer b;
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(b.data(), nullptr);
}

TEST(Buffer, AllocatesAlignedStorageOfOddSizes) {
  for (size_t bytes : {1u, 3u, 63u, 64u, 65u, 1000u}) {
    Buffer b(bytes);
    EXPECT_EQ(b.size(), bytes);
    EXPECT_EQ(b.bytes().size(), bytes);
    EXPECT_TRUE(is_aligned(b.data(), 64)) << bytes;
    std::memset(b.data(), 0xab, bytes);  // the whole range is writable (ASan would complain)
  }
}

TEST(Buffer, HonoursLargerAlignments) {
  Buffer b(10, 4096);
  EXPECT_EQ(b.alignment(), 4096u);
  EXPECT_TRUE(is_aligned(b.data(), 4096));
}

TEST(Buffer, MoveTransfersOwnership) {
  Buffer a(128);
  void* p = a.data();
  Buffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 128u);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT: checking the moved-from state on purpose
  EXPECT_EQ(a.size(), 0u);
  Buffer c(8);
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), 128u);
}

TEST(Buffer, AllocateReportsExhaustionAsAStatus) {
  Result<Buffer> ok = Buffer::allocate(256);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->size(), 256u);
  Result<Buffer> huge = Buffer::allocate(std::numeric_limits<size_t>::max() - 8);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(huge.status().message().find("out of memory"), std::string::npos);
}

// Pages::kHuge puts a large buffer in a huge-page backed mapping of its own
// (core/huge_pages.h): 2 MiB aligned whatever alignment was asked for, every byte usable, and
// released on move-assign and destruction like any other. Small ones stay ordinary.
TEST(Buffer, HugePagedBuffersStartOnAHugePage) {
  constexpr size_t kLarge = (size_t{5} << 20) + 3;
  constexpr size_t kHugePage = size_t{2} << 20;
  for (size_t alignment : {Buffer::kDefaultAlignment, size_t{4096}}) {
    Buffer b(kLarge, alignment, Pages::kHuge);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kHugePage, 0u) << alignment;
    EXPECT_EQ(b.alignment(), alignment);
    std::memset(b.data(), 0x11, b.size());
    Buffer moved = std::move(b);
    EXPECT_EQ(static_cast<const unsigned char*>(moved.data())[kLarge - 1], 0x11);
    moved = Buffer(kLarge / 2, alignment);  // frees the huge-paged mapping for an ordinary one
    EXPECT_EQ(reinterpret_cast<uintptr_t>(moved.data()) % alignment, 0u);
    std::memset(moved.data(), 0x22, moved.size());
  }
  Result<Buffer> allocated = Buffer::allocate(kLarge, 4096, Pages::kHuge);
  ASSERT_TRUE(allocated.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(allocated->data()) % kHugePage, 0u);
  Buffer small(1000, 64, Pages::kHuge);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
  std::memset(small.data(), 0x33, small.size());
}

TEST(Buffer, ZeroBytesAllocatesNothing) {
  Result<Buffer> b = Buffer::allocate(0);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->empty());
}

}  // namespace
}  // namespace ms
