// The one ZeRO-1 ownership rule (the trainer's per bucket, the offline reshard's per tensor box):
// contiguous ranges in rank order, every element owned once, members cut where ranges end.
#include "ckpt/zero_ownership.h"

#include <gtest/gtest.h>

#include <vector>

namespace ms::ckpt {
namespace {

TEST(ZeroOwnership, RanksOwnContiguousRangesInRankOrder) {
  // 10 elements over 4 ranks: floor(10 r / 4) cuts at 0, 2, 5, 7, 10.
  EXPECT_EQ(zero_owned_range(10, 4, 0), (ZeroRange{0, 2}));
  EXPECT_EQ(zero_owned_range(10, 4, 1), (ZeroRange{2, 5}));
  EXPECT_EQ(zero_owned_range(10, 4, 2), (ZeroRange{5, 7}));
  EXPECT_EQ(zero_owned_range(10, 4, 3), (ZeroRange{7, 10}));
  // A unit padded to a multiple of dp splits evenly.
  for (int r = 0; r < 3; ++r) EXPECT_EQ(zero_owned_range(12, 3, r), (ZeroRange{4 * r, 4 * r + 4}));
  // Fewer elements than ranks: some ranks own nothing.
  EXPECT_EQ(zero_owned_range(2, 4, 0).length(), 0);
  EXPECT_EQ(zero_owned_range(0, 2, 1).length(), 0);
}

TEST(ZeroOwnership, EveryElementIsOwnedExactlyOnce) {
  for (int64_t n = 0; n <= 40; ++n) {
    for (int dp = 1; dp <= 6; ++dp) {
      int64_t next = 0;
      for (int r = 0; r < dp; ++r) {
        const ZeroRange owned = zero_owned_range(n, dp, r);
        EXPECT_EQ(owned.begin, next) << n << " over " << dp;
        EXPECT_GE(owned.length(), 0);
        next = owned.end;
      }
      EXPECT_EQ(next, n) << n << " over " << dp;
    }
  }
}

TEST(ZeroOwnership, PiecesCutMembersWhereRangesEnd) {
  // Members of 5, 0 and 7 elements in a unit padded to 14, over 2 ranks owning [0, 7), [7, 14).
  const std::vector<int64_t> members = {5, 0, 7};
  EXPECT_EQ(zero_owned_pieces(members, 14, 2, 0),
            (std::vector<ZeroPiece>{{0, 0, 5, 0, 0}, {2, 0, 2, 5, 5}}));
  // Rank 1 owns the rest of member 2 and the two padding elements, which are no member's.
  EXPECT_EQ(zero_owned_pieces(members, 14, 2, 1), (std::vector<ZeroPiece>{{2, 2, 7, 7, 0}}));
}

}  // namespace
}  // namespace ms::ckpt
