// ZeRO-1 ownership: which data-parallel rank owns which elements of the optimizer state. This is
// the one rule, used by the trainer (train/flat_layout.h: the unit is a gradient bucket, which
// the trainer pads to a multiple of dp so that a reduce-scatter splits it evenly) and by the
// offline reshard (ckpt/reshard_plan.h: the unit is one tensor's tensor-parallel box). It lives
// in lib/ckpt because that is the lowest module both link: train links ckpt, and ckpt links
// neither train nor parallel.
//
// A unit of N elements is split over dp ranks into contiguous ranges in rank order: rank r owns
// [N * r / dp, N * (r + 1) / dp). Every element is owned exactly once; when dp divides N (a
// padded bucket) every rank owns N / dp elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ms::ckpt {

// Elements [begin, end) of a unit.
struct ZeroRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t length() const { return end - begin; }
  bool operator==(const ZeroRange&) const = default;
};

// The elements of a unit of `numel` elements that data-parallel rank `rank` of `dp` owns.
// Requires dp >= 1, 0 <= rank < dp and numel >= 0 (callers check their inputs where they enter).
ZeroRange zero_owned_range(int64_t numel, int dp, int rank);

// Elements [member_begin, member_end) of member `member` of a unit, found at `unit_offset` of
// the unit and at `owned_offset` of the owning rank's range (unit_offset - owned range begin).
struct ZeroPiece {
  size_t member = 0;
  int64_t member_begin = 0;
  int64_t member_end = 0;
  int64_t unit_offset = 0;
  int64_t owned_offset = 0;
  bool operator==(const ZeroPiece&) const = default;
};

// The pieces of a unit's members that `rank` owns, in unit order. The members (of
// `member_numels` elements; zero is allowed) lie back to back from the start of the unit, which
// holds `unit_numel` >= their sum elements (the rest is padding, owned but no member's). A member
// with no owned element yields no piece.
std::vector<ZeroPiece> zero_owned_pieces(std::span<const int64_t> member_numels,
                                         int64_t unit_numel, int dp, int rank);

}  // namespace ms::ckpt
