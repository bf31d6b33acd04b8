// Box arithmetic for checkpoints: regular regions of global tensors, how a rank's ShardSpec
// (a box, or a flat row-major range of one) breaks into such regions, whether a set of boxes
// tiles a tensor exactly, and copying the shared part of two boxes between their row-major
// buffers. Internal to lib/ckpt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/shard_spec.h"
#include "core/status.h"

namespace ms::ckpt {

// Elements [offsets, offsets + lengths) of a global tensor.
struct Box {
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
  int64_t numel() const;
  bool operator==(const Box&) const = default;
};

// A box plus where its elements start in a rank's local buffer (in elements).
struct LocalBox {
  Box box;
  int64_t local_offset = 0;
};

// The regular boxes a spec's elements form, in local-buffer order. A whole box is one box; a
// flat range [b, e) of a box with shape S becomes at most 2 * rank(S) boxes, each contiguous
// both in the local buffer and in row-major order of the box (partial rows, whole rows,
// whole planes, ...). A zero-element spec gives no boxes.
std::vector<LocalBox> spec_boxes(const comm::ShardSpec& spec);

// Splits `box` along its outermost dimension longer than one into pieces of at most
// `max_elements` elements each (a single slice of that dimension may still exceed it).
std::vector<Box> split_box(const Box& box, int64_t max_elements);

// The elements both boxes hold; nullopt when none.
std::optional<Box> intersect_boxes(const Box& a, const Box& b);

// "[0:2, 0:3]": the half-open interval of every dimension, as in Python slicing.
std::string box_string(const Box& box);

// Why a set of boxes does not tile a tensor exactly: two boxes sharing elements (indices into
// the boxes given), or a box of elements no box holds (with the boxes just before and after
// it along the dimension where it was found, when there are such boxes).
struct TilingProblem {
  static constexpr size_t kNone = static_cast<size_t>(-1);
  bool overlap = false;
  size_t first = kNone, second = kNone;  // overlap: the two boxes; gap: the neighbours
  Box gap;
};

// nullopt when `boxes`, each already known to lie inside a tensor of `shape`, are pairwise
// disjoint and together cover it; otherwise the first problem found. Exact box arithmetic,
// not element counting: the tensor is cut into slabs along dimension 0 at every box boundary,
// the boxes spanning each slab must tile the rest of it (recursively, dimension by dimension),
// and in the last dimension at most one box may hold each interval. O(n log n) for the
// layouts saves produce (row slabs, column splits, ZeRO flat ranges).
std::optional<TilingProblem> find_tiling_problem(std::span<const int64_t> shape,
                                                 std::span<const Box> boxes);

// Copies the elements of `region` from `src`, the row-major buffer of box `src_box`, to `dst`,
// the row-major buffer of `dst_box`. `element_size` is in bytes. The copier trusts nothing:
// InvalidArgument (naming the boxes) unless `region` lies inside both boxes and each buffer
// holds exactly its box's bytes (sizes computed with overflow checks), so no input can make it
// read or write out of bounds.
Status copy_region(const Box& region, const Box& src_box, std::span<const std::byte> src,
                   const Box& dst_box, std::span<std::byte> dst, size_t element_size);

}  // namespace ms::ckpt
