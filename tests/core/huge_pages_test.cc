#include "core/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace ms {
namespace {

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// The VmFlags line of the mapping that holds `p` in /proc/self/smaps ("" when not found).
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = address(p) >= begin && address(p) < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool kernel_has_transparent_huge_pages() {
  return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good();
}

TEST(HugePagesTest, SmallArraysAreCacheLineAligned) {
  for (size_t bytes : {size_t{1}, size_t{100}, kHugePageBytes - 1}) {
    void* p = allocate_streamed(bytes);
    EXPECT_EQ(address(p) % 64, 0u) << bytes;
    std::memset(p, 0x5a, bytes);
    free_streamed(p, bytes);
  }
}

TEST(HugePagesTest, LargeArraysStartOnAHugePageAndAreAdvised) {
  const size_t bytes = 3 * kHugePageBytes + 12345;
  auto* p = static_cast<unsigned char*>(allocate_streamed(bytes));
  EXPECT_EQ(address(p) % kHugePageBytes, 0u);
  // Every byte is there and writable, the last included.
  std::memset(p, 0x5a, bytes);
  EXPECT_EQ(p[bytes - 1], 0x5a);
  if (kernel_has_transparent_huge_pages()) {
    // "hg": the mapping carries MADV_HUGEPAGE, whatever the system-wide setting.
    const std::string flags = vm_flags_of(p);
    EXPECT_NE((" " + flags + " ").find(" hg "), std::string::npos) << flags;
  }
  free_streamed(p, bytes);
}

TEST(HugePagesTest, VectorsGrowCopyAndCompareLikeStdVectors) {
  HugePageVector<float> v(kHugePageBytes / sizeof(float) + 7, 1.5f);
  v.push_back(2.0f);
  EXPECT_EQ(address(v.data()) % kHugePageBytes, 0u);
  const HugePageVector<float> copy = v;
  EXPECT_EQ(copy, v);
  EXPECT_EQ(copy.back(), 2.0f);
  HugePageVector<uint8_t> empty;
  EXPECT_TRUE(empty.empty());
  empty.resize(3, 7);
  EXPECT_EQ(empty, (HugePageVector<uint8_t>{7, 7, 7}));
}

}  // namespace
}  // namespace ms
