// Context-parallel layout (parallel/cp_layout.h): rank r holds chunks r and 2cp-1-r, the ranks
// together hold every position once, and each rank's causal work is the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "parallel/cp_layout.h"

namespace ms::parallel {
namespace {

TEST(CpLayout, RankHoldsChunkRAndItsMirror) {
  // T 16, cp 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  EXPECT_EQ(cp_positions(16, 2, 0), (std::vector<int64_t>{0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(cp_positions(16, 2, 1), (std::vector<int64_t>{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(cp_positions(8, 1, 0), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(CpLayout, RanksCoverEveryPositionOnceWithEqualCausalWork) {
  for (int cp : {1, 2, 3, 4}) {
    const int64_t T = 8 * cp;
    std::vector<int64_t> all;
    std::vector<int64_t> work;
    for (int r = 0; r < cp; ++r) {
      const std::vector<int64_t> p = cp_positions(T, cp, r);
      ASSERT_EQ(static_cast<int64_t>(p.size()), T / cp);
      all.insert(all.end(), p.begin(), p.end());
      // Causal work: each query at position i sees i + 1 keys.
      work.push_back(std::accumulate(p.begin(), p.end(), int64_t{0}) + T / cp);
    }
    std::sort(all.begin(), all.end());
    std::vector<int64_t> want(static_cast<size_t>(T));
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(all, want) << "cp " << cp;
    EXPECT_TRUE(std::all_of(work.begin(), work.end(), [&](int64_t w) { return w == work[0]; }))
        << "cp " << cp;
  }
}

TEST(CpLayout, TakesEachRowsLocalTokens) {
  const std::vector<int32_t> rows = {0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17};
  std::vector<int32_t> out(8);
  cp_take(rows.data(), 2, 8, 2, 1, out.data());  // chunks of 2: rank 1 holds 1 and 2
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 4, 5, 12, 13, 14, 15}));
  cp_take(rows.data(), 2, 8, 2, 0, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 6, 7, 10, 11, 16, 17}));
}

}  // namespace
}  // namespace ms::parallel
