// ShardSpec: which slice of a global tensor one rank holds. Parameters, checkpoints and the
// resharding loader all speak in global coordinates, so a slice is described against the
// tensor's global shape:
//   - a box: per-dimension offsets and lengths (tensor-parallel splits, pipeline stages, expert
//     ranges), and
//   - optionally a flat range [flat_begin, flat_end) of that box's elements in row-major order
//     (ZeRO: each data-parallel rank owns a contiguous range of the flattened local shard).
// A rank's local buffer holds exactly the selected elements, row-major, box first then range.
//
// Uneven splits: splitting a dimension of length L into n parts gives the first L % n parts
// L / n + 1 elements and the rest L / n, in order (so parts differ by at most one element).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace ms::comm {

using Shape = std::vector<int64_t>;

// One run of elements that two shards share: `length` elements stored contiguously at
// `a_offset` in shard a's local buffer and at `b_offset` in shard b's.
struct OverlapRun {
  int64_t a_offset = 0;
  int64_t b_offset = 0;
  int64_t length = 0;
  bool operator==(const OverlapRun&) const = default;
};

class ShardSpec {
 public:
  // The whole tensor (every rank holds all of it). Dimensions must be >= 0.
  static ShardSpec replicated(Shape global_shape);
  // Part `index` of `parts` along dimension `dim`, uneven rule above. InvalidArgument for a bad
  // dim, parts < 1 or index outside [0, parts).
  static Result<ShardSpec> split(Shape global_shape, int dim, int parts, int index);
  // A box given directly. InvalidArgument when it does not fit inside the global shape.
  static Result<ShardSpec> box(Shape global_shape, Shape offsets, Shape lengths);
  // Elements [begin, end) of the whole tensor in row-major order (ZeRO over an unsplit tensor).
  static Result<ShardSpec> flat_range(Shape global_shape, int64_t begin, int64_t end);

  // Elements [begin, end) of this spec's box, row-major; this spec must hold its whole box.
  // InvalidArgument when the range does not fit in the box or this spec is already a range.
  Result<ShardSpec> with_flat_range(int64_t begin, int64_t end) const;

  const Shape& global_shape() const { return global_shape_; }
  const Shape& offsets() const { return offsets_; }
  const Shape& lengths() const { return lengths_; }
  int rank() const { return static_cast<int>(global_shape_.size()); }
  int64_t flat_begin() const { return flat_begin_; }
  int64_t flat_end() const { return flat_end_; }

  // Elements held by this rank.
  int64_t numel() const { return flat_end_ - flat_begin_; }
  // Elements of the box (equal to numel() unless a flat range narrows it).
  int64_t box_numel() const;
  int64_t global_numel() const;
  // True when the spec holds its entire box (no narrowing flat range).
  bool is_whole_box() const { return flat_begin_ == 0 && flat_end_ == box_numel(); }
  // True when the spec holds the entire tensor.
  bool is_replicated() const;
  // Whether the element at global multi-index `index` is held here (false for a wrong rank).
  bool contains(const Shape& index) const;

  bool operator==(const ShardSpec& other) const = default;

  // e.g. "global [8,6] offsets [0,3] lengths [8,3]" or "... flat [4,10)".
  std::string to_string() const;

 private:
  ShardSpec(Shape global_shape, Shape offsets, Shape lengths);

  Shape global_shape_;
  Shape offsets_;
  Shape lengths_;
  int64_t flat_begin_ = 0;
  int64_t flat_end_ = 0;
};

// Part `index` of `parts` of a length-`length` dimension: {offset, length} under the uneven rule.
struct SplitRange {
  int64_t offset = 0;
  int64_t length = 0;
};
SplitRange split_range(int64_t length, int parts, int index);

// Elements held by both a and b, as runs contiguous in both local buffers, in increasing order of
// a_offset (adjacent runs are merged). This is what a resharding copy needs. InvalidArgument
// when the global shapes differ.
Result<std::vector<OverlapRun>> overlap_runs(const ShardSpec& a, const ShardSpec& b);

// The elements both hold, as a ShardSpec; nullopt when they share none. Exact whenever the
// result is one box, or one flat range of a box: both whole boxes, two ranges of the same box,
// or a range whose box lies inside the other's whole box. Otherwise (ranges of different
// boxes) the shared elements form no single spec and InvalidArgument says to use
// overlap_runs(); also InvalidArgument when the global shapes differ.
Result<std::optional<ShardSpec>> intersect(const ShardSpec& a, const ShardSpec& b);

}  // namespace ms::comm
