// ShardSpec arithmetic; see shard_spec.h. Overlaps are computed row by row over the two boxes'
// common box (a row being a run along the last dimension, contiguous in both row-major local
// layouts), then clipped to each side's flat range.
#include "comm/shard_spec.h"

#include <algorithm>
#include <cassert>
#include <sstream>

namespace ms::comm {
namespace {

int64_t product(const Shape& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string shape_text(const Shape& dims) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < dims.size(); ++i) out << (i ? "," : "") << dims[i];
  out << ']';
  return out.str();
}

Status check_global_shape(const Shape& global_shape) {
  for (int64_t d : global_shape) {
    if (d < 0)
      return InvalidArgument("global shape " + shape_text(global_shape) +
                             " has a negative dimension");
  }
  return Status::OK();
}

// Row-major position of global `index` inside the box (offsets, lengths).
int64_t position_in_box(const Shape& index, const Shape& offsets, const Shape& lengths) {
  int64_t pos = 0;
  for (size_t d = 0; d < index.size(); ++d) pos = pos * lengths[d] + (index[d] - offsets[d]);
  return pos;
}

struct Box {
  Shape offsets;
  Shape lengths;
  bool empty = false;
};

Box common_box(const ShardSpec& a, const ShardSpec& b) {
  Box box;
  for (int d = 0; d < a.rank(); ++d) {
    const int64_t begin = std::max(a.offsets()[d], b.offsets()[d]);
    const int64_t end = std::min(a.offsets()[d] + a.lengths()[d], b.offsets()[d] + b.lengths()[d]);
    box.offsets.push_back(begin);
    box.lengths.push_back(std::max<int64_t>(end - begin, 0));
    if (end <= begin) box.empty = true;
  }
  return box;
}

bool box_inside(const ShardSpec& inner, const ShardSpec& outer) {
  for (int d = 0; d < inner.rank(); ++d) {
    if (inner.offsets()[d] < outer.offsets()[d] ||
        inner.offsets()[d] + inner.lengths()[d] > outer.offsets()[d] + outer.lengths()[d]) {
      return false;
    }
  }
  return true;
}

// Part of the row of `width` elements starting at box position `pos` that lies inside the
// spec's flat range, as [first, last) offsets into the row.
std::pair<int64_t, int64_t> clip_row(const ShardSpec& spec, int64_t pos, int64_t width) {
  return {std::max<int64_t>(spec.flat_begin() - pos, 0),
          std::min<int64_t>(spec.flat_end() - pos, width)};
}

void append_run(std::vector<OverlapRun>& runs, OverlapRun run) {
  if (!runs.empty()) {
    OverlapRun& last = runs.back();
    if (last.a_offset + last.length == run.a_offset &&
        last.b_offset + last.length == run.b_offset) {
      last.length += run.length;
      return;
    }
  }
  runs.push_back(run);
}

Status check_same_tensor(const ShardSpec& a, const ShardSpec& b) {
  if (a.global_shape() == b.global_shape()) return Status::OK();
  return InvalidArgument("shard specs describe different tensors: global shapes " +
                         shape_text(a.global_shape()) + " and " + shape_text(b.global_shape()));
}

}  // namespace

SplitRange split_range(int64_t length, int parts, int index) {
  assert(parts >= 1 && index >= 0 && index < parts);
  const int64_t base = length / parts;
  const int64_t extra = length % parts;  // the first `extra` parts get one more element
  const int64_t offset = index * base + std::min<int64_t>(index, extra);
  return {offset, base + (index < extra ? 1 : 0)};
}

ShardSpec::ShardSpec(Shape global_shape, Shape offsets, Shape lengths)
    : global_shape_(std::move(global_shape)),
      offsets_(std::move(offsets)),
      lengths_(std::move(lengths)) {
  flat_end_ = box_numel();
}

ShardSpec ShardSpec::replicated(Shape global_shape) {
  assert(check_global_shape(global_shape).ok());
  Shape offsets(global_shape.size(), 0);
  Shape lengths = global_shape;
  return ShardSpec(std::move(global_shape), std::move(offsets), std::move(lengths));
}

Result<ShardSpec> ShardSpec::split(Shape global_shape, int dim, int parts, int index) {
  MS_RETURN_IF_ERROR(check_global_shape(global_shape));
  if (dim < 0 || dim >= static_cast<int>(global_shape.size())) {
    return InvalidArgument("cannot split dimension " + std::to_string(dim) + " of shape " +
                           shape_text(global_shape));
  }
  if (parts < 1 || index < 0 || index >= parts) {
    return InvalidArgument("split part " + std::to_string(index) + " of " + std::to_string(parts) +
                           " is not a valid part");
  }
  ShardSpec spec = replicated(std::move(global_shape));
  const SplitRange range = split_range(spec.global_shape_[dim], parts, index);
  spec.offsets_[dim] = range.offset;
  spec.lengths_[dim] = range.length;
  spec.flat_end_ = spec.box_numel();
  return spec;
}

Result<ShardSpec> ShardSpec::box(Shape global_shape, Shape offsets, Shape lengths) {
  MS_RETURN_IF_ERROR(check_global_shape(global_shape));
  bool fits = offsets.size() == global_shape.size() && lengths.size() == global_shape.size();
  for (size_t d = 0; fits && d < global_shape.size(); ++d) {
    fits = offsets[d] >= 0 && lengths[d] >= 0 && offsets[d] + lengths[d] <= global_shape[d];
  }
  if (!fits) {
    return InvalidArgument("box offsets " + shape_text(offsets) + " lengths " +
                           shape_text(lengths) + " does not fit in global shape " +
                           shape_text(global_shape));
  }
  return ShardSpec(std::move(global_shape), std::move(offsets), std::move(lengths));
}

Result<ShardSpec> ShardSpec::flat_range(Shape global_shape, int64_t begin, int64_t end) {
  MS_RETURN_IF_ERROR(check_global_shape(global_shape));
  return replicated(std::move(global_shape)).with_flat_range(begin, end);
}

Result<ShardSpec> ShardSpec::with_flat_range(int64_t begin, int64_t end) const {
  if (!is_whole_box()) {
    return InvalidArgument("shard " + to_string() + " is already a flat range");
  }
  if (begin < 0 || begin > end || end > box_numel()) {
    return InvalidArgument("flat range [" + std::to_string(begin) + "," + std::to_string(end) +
                           ") does not fit in the " + std::to_string(box_numel()) +
                           " elements of shard " + to_string());
  }
  ShardSpec spec = *this;
  spec.flat_begin_ = begin;
  spec.flat_end_ = end;
  return spec;
}

int64_t ShardSpec::box_numel() const { return product(lengths_); }

int64_t ShardSpec::global_numel() const { return product(global_shape_); }

bool ShardSpec::is_replicated() const { return lengths_ == global_shape_ && is_whole_box(); }

bool ShardSpec::contains(const Shape& index) const {
  if (index.size() != global_shape_.size()) return false;
  for (size_t d = 0; d < index.size(); ++d) {
    if (index[d] < offsets_[d] || index[d] >= offsets_[d] + lengths_[d]) return false;
  }
  const int64_t pos = position_in_box(index, offsets_, lengths_);
  return pos >= flat_begin_ && pos < flat_end_;
}

std::string ShardSpec::to_string() const {
  std::string text = "global " + shape_text(global_shape_) + " offsets " + shape_text(offsets_) +
                     " lengths " + shape_text(lengths_);
  if (!is_whole_box()) {
    text += " flat [" + std::to_string(flat_begin_) + "," + std::to_string(flat_end_) + ")";
  }
  return text;
}

Result<std::vector<OverlapRun>> overlap_runs(const ShardSpec& a, const ShardSpec& b) {
  MS_RETURN_IF_ERROR(check_same_tensor(a, b));
  std::vector<OverlapRun> runs;
  const Box box = common_box(a, b);
  if (box.empty || a.numel() == 0 || b.numel() == 0) return runs;
  const int dims = a.rank();
  const int64_t width = dims == 0 ? 1 : box.lengths[dims - 1];
  // `index` walks the first element of every row of the common box in row-major order.
  Shape index = box.offsets;
  while (true) {
    const int64_t a_pos = position_in_box(index, a.offsets(), a.lengths());
    const int64_t b_pos = position_in_box(index, b.offsets(), b.lengths());
    const auto [a_first, a_last] = clip_row(a, a_pos, width);
    const auto [b_first, b_last] = clip_row(b, b_pos, width);
    const int64_t first = std::max(a_first, b_first);
    const int64_t last = std::min(a_last, b_last);
    if (first < last) {
      append_run(runs,
                 {a_pos + first - a.flat_begin(), b_pos + first - b.flat_begin(), last - first});
    }
    int d = dims - 2;
    for (; d >= 0; --d) {
      if (++index[d] < box.offsets[d] + box.lengths[d]) break;
      index[d] = box.offsets[d];
    }
    if (d < 0) break;
  }
  return runs;
}

Result<std::optional<ShardSpec>> intersect(const ShardSpec& a, const ShardSpec& b) {
  MS_RETURN_IF_ERROR(check_same_tensor(a, b));
  const Box box = common_box(a, b);
  if (box.empty) return std::optional<ShardSpec>();
  if (a.is_whole_box() && b.is_whole_box()) {
    MS_ASSIGN_OR_RETURN(ShardSpec spec, ShardSpec::box(a.global_shape(), box.offsets, box.lengths));
    return std::optional<ShardSpec>(std::move(spec));
  }
  if (a.offsets() == b.offsets() && a.lengths() == b.lengths()) {
    const int64_t begin = std::max(a.flat_begin(), b.flat_begin());
    const int64_t end = std::min(a.flat_end(), b.flat_end());
    if (begin >= end) return std::optional<ShardSpec>();
    MS_ASSIGN_OR_RETURN(ShardSpec whole,
                        ShardSpec::box(a.global_shape(), a.offsets(), a.lengths()));
    MS_ASSIGN_OR_RETURN(ShardSpec spec, whole.with_flat_range(begin, end));
    return std::optional<ShardSpec>(std::move(spec));
  }
  if (a.is_whole_box() && box_inside(b, a)) return std::optional<ShardSpec>(b);
  if (b.is_whole_box() && box_inside(a, b)) return std::optional<ShardSpec>(a);
  MS_ASSIGN_OR_RETURN(std::vector<OverlapRun> runs, overlap_runs(a, b));
  if (runs.empty()) return std::optional<ShardSpec>();
  return InvalidArgument("the elements shared by shard " + a.to_string() + " and shard " +
                         b.to_string() + " form no single box or flat range; use overlap_runs()");
}

}  // namespace ms::comm
