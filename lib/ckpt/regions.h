// Box arithmetic for checkpoints: regular regions of global tensors, how a rank's ShardSpec
// (a box, or a flat row-major range of one) breaks into such regions, and copying the shared
// part of two boxes between their row-major buffers. Internal to lib/ckpt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "comm/shard_spec.h"

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

// Copies the elements of `region` (inside both boxes) from `src`, the row-major buffer of box
// `src_box`, to `dst`, the row-major buffer of `dst_box`. `element_size` is in bytes.
void copy_region(const Box& region, const Box& src_box, const std::byte* src, const Box& dst_box,
                 std::byte* dst, size_t element_size);

}  // namespace ms::ckpt
