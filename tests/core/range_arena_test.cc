#include "core/range_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "core/philox.h"

namespace ms {
namespace {

TEST(RangeArena, RoundsToTheAlignmentAndCountsUse) {
  RangeArena arena(4096, 256);
  const auto a = arena.allocate(1);
  const auto b = arena.allocate(300);
  const auto c = arena.allocate(0);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 256u);
  EXPECT_EQ(*c, 768u);  // 300 bytes took two units
  EXPECT_EQ(arena.in_use(), 1024u);
  EXPECT_EQ(arena.allocated_blocks(), 3u);
  EXPECT_TRUE(arena.release(*b));
  EXPECT_EQ(arena.in_use(), 512u);
  EXPECT_EQ(arena.peak(), 1024u);
  arena.reset_peak();
  EXPECT_EQ(arena.peak(), 512u);
}

TEST(RangeArena, RefusesWhatDoesNotFitAndUnknownOffsets) {
  RangeArena arena(1000, 256);  // a ragged tail is never handed out
  EXPECT_EQ(arena.capacity(), 768u);
  EXPECT_FALSE(arena.allocate(769).has_value());
  const auto a = arena.allocate(768);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(arena.allocate(1).has_value());
  EXPECT_FALSE(arena.release(*a + 256));  // not a block's start
  EXPECT_FALSE(arena.release(5000));
  EXPECT_TRUE(arena.release(*a));
  EXPECT_FALSE(arena.release(*a));  // twice
  EXPECT_EQ(arena.largest_free(), 768u);
  EXPECT_FALSE(RangeArena(100, 256).allocate(0).has_value());  // no whole unit at all
  EXPECT_FALSE(arena.allocate(SIZE_MAX).has_value());          // no overflow when rounding
}

TEST(RangeArena, BestFitAndMergingKeepTheArenaWhole) {
  RangeArena arena(8 * 256, 256);
  const auto a = arena.allocate(256), b = arena.allocate(512), c = arena.allocate(256),
             d = arena.allocate(768);
  ASSERT_TRUE(a && b && c && d);
  arena.release(*b);  // a 512 hole at 256
  arena.release(*d);  // 768 + the 256 tail at 1280
  // 256 bytes fit the 512 hole better than the 1024 tail.
  EXPECT_EQ(arena.allocate(256).value(), *b);
  arena.release(*b);
  arena.release(*a);
  arena.release(*c);  // merges with both sides
  EXPECT_EQ(arena.in_use(), 0u);
  EXPECT_EQ(arena.largest_free(), arena.capacity());
  EXPECT_EQ(arena.allocate(8 * 256).value(), 0u);
}

TEST(RangeArena, TheSameStepLandsOnTheSameOffsets) {
  // A training step's pattern, twice: the offsets of the second equal the first's.
  RangeArena arena(1 << 20, 256);
  auto step = [&] {
    std::vector<size_t> offsets, held;
    for (int i = 0; i < 40; ++i) {
      const size_t bytes = 100 + static_cast<size_t>(uniform(7, 0, static_cast<uint64_t>(i)) * 9000);
      const size_t at = arena.allocate(bytes).value();
      offsets.push_back(at);
      held.push_back(at);
      if (i % 3 == 2) {
        arena.release(held[held.size() - 2]);
        held.erase(held.end() - 2);
      }
    }
    for (const size_t at : held) arena.release(at);
    return offsets;
  };
  EXPECT_EQ(step(), step());
  EXPECT_EQ(arena.in_use(), 0u);
}

TEST(RangeArena, RandomWorkloadNeverOverlapsAndAccountsExactly) {
  RangeArena arena(64 * 1024, 256);
  std::map<size_t, size_t> live;  // offset -> rounded size
  for (uint64_t i = 0; i < 4000; ++i) {
    const bool take = live.empty() || uniform(11, 0, i) < 0.55f;
    if (take) {
      const size_t bytes = static_cast<size_t>(uniform(11, 1, i) * 6000);
      const auto at = arena.allocate(bytes);
      if (!at) {
        EXPECT_LT(arena.largest_free(), std::max<size_t>(256, (bytes + 255) / 256 * 256));
        continue;
      }
      const size_t size = std::max<size_t>(256, (bytes + 255) / 256 * 256);
      EXPECT_EQ(*at % 256, 0u);
      EXPECT_LE(*at + size, arena.capacity());
      const auto next = live.lower_bound(*at);
      if (next != live.end()) {
        EXPECT_LE(*at + size, next->first);
      }
      if (next != live.begin()) {
        EXPECT_LE(std::prev(next)->first + std::prev(next)->second, *at);
      }
      live.emplace(*at, size);
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(uniform(11, 2, i) * static_cast<float>(live.size())) %
                           static_cast<long>(live.size()));
      EXPECT_TRUE(arena.release(it->first));
      live.erase(it);
    }
    size_t sum = 0;
    for (const auto& [at, size] : live) sum += size;
    ASSERT_EQ(arena.in_use(), sum);
  }
  for (const auto& [at, size] : live) arena.release(at);
  EXPECT_EQ(arena.largest_free(), arena.capacity());
}

}  // namespace
}  // namespace ms
