// The ZeRO-1 ownership rule; see zero_ownership.h.
#include "ckpt/zero_ownership.h"

#include <algorithm>

namespace ms::ckpt {

ZeroRange zero_owned_range(int64_t numel, int dp, int rank) {
  return {numel * rank / dp, numel * (rank + 1) / dp};
}

std::vector<ZeroPiece> zero_owned_pieces(std::span<const int64_t> member_numels,
                                         int64_t unit_numel, int dp, int rank) {
  const ZeroRange owned = zero_owned_range(unit_numel, dp, rank);
  std::vector<ZeroPiece> pieces;
  int64_t member_offset = 0;
  for (size_t m = 0; m < member_numels.size(); ++m) {
    const int64_t begin = std::max(owned.begin, member_offset);
    const int64_t end = std::min(owned.end, member_offset + member_numels[m]);
    if (begin < end) {
      pieces.push_back({m, begin - member_offset, end - member_offset, begin,
                        begin - owned.begin});
    }
    member_offset += member_numels[m];
  }
  return pieces;
}

}  // namespace ms::ckpt
