// Box decomposition and copying; see regions.h.
#include "ckpt/regions.h"

#include <algorithm>
#include <cstring>

#include "core/checked_math.h"

namespace ms::ckpt {

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t l : lengths) n *= l;
  return n;
}

namespace {

// Row-major multi-index of flat element `flat` in a box of `lengths`.
std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& lengths) {
  std::vector<int64_t> index(lengths.size(), 0);
  for (size_t d = lengths.size(); d-- > 0;) {
    index[d] = flat % lengths[d];
    flat /= lengths[d];
  }
  return index;
}

// Boxes (relative to a box of shape `lengths`) covering its flat range [begin, end). At each
// position the largest aligned block of trailing dimensions is taken, repeated along the
// dimension before it as far as the range and that dimension allow.
std::vector<Box> decompose_range(const std::vector<int64_t>& lengths, int64_t begin, int64_t end) {
  const size_t rank = lengths.size();
  std::vector<int64_t> inner(rank + 1, 1);  // inner[j]: elements of dims j..rank-1
  for (size_t d = rank; d-- > 0;) inner[d] = inner[d + 1] * lengths[d];
  std::vector<Box> boxes;
  if (rank == 0) {
    if (end > begin) boxes.push_back({std::vector<int64_t>(rank, 0), lengths});
    return boxes;
  }
  while (begin < end) {
    size_t j = 1;
    while (j < rank && (begin % inner[j] != 0 || inner[j] > end - begin)) ++j;
    const int64_t room = lengths[j - 1] - (begin / inner[j]) % lengths[j - 1];
    const int64_t count = std::min((end - begin) / inner[j], room);
    Box box{unravel(begin, lengths), std::vector<int64_t>(rank, 1)};
    box.lengths[j - 1] = count;
    for (size_t d = j; d < rank; ++d) box.lengths[d] = lengths[d];
    boxes.push_back(std::move(box));
    begin += count * inner[j];
  }
  return boxes;
}

}  // namespace

std::vector<LocalBox> spec_boxes(const comm::ShardSpec& spec) {
  std::vector<LocalBox> out;
  int64_t local = 0;
  for (Box& box : decompose_range(spec.lengths(), spec.flat_begin(), spec.flat_end())) {
    for (size_t d = 0; d < box.offsets.size(); ++d) box.offsets[d] += spec.offsets()[d];
    const int64_t n = box.numel();
    out.push_back({std::move(box), local});
    local += n;
  }
  return out;
}

std::vector<Box> split_box(const Box& box, int64_t max_elements) {
  size_t dim = 0;
  while (dim < box.lengths.size() && box.lengths[dim] == 1) ++dim;
  if (dim == box.lengths.size() || box.numel() <= max_elements) return {box};
  const int64_t slice = box.numel() / box.lengths[dim];
  const int64_t per_piece = std::max<int64_t>(1, max_elements / std::max<int64_t>(1, slice));
  std::vector<Box> pieces;
  for (int64_t start = 0; start < box.lengths[dim]; start += per_piece) {
    Box piece = box;
    piece.offsets[dim] += start;
    piece.lengths[dim] = std::min(per_piece, box.lengths[dim] - start);
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

std::optional<Box> intersect_boxes(const Box& a, const Box& b) {
  Box out{a.offsets, a.lengths};
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const int64_t hi = std::min(a.offsets[d] + a.lengths[d], b.offsets[d] + b.lengths[d]);
    if (hi <= lo) return std::nullopt;
    out.offsets[d] = lo;
    out.lengths[d] = hi - lo;
  }
  return out;
}

std::string box_string(const Box& box) {
  std::string out = "[";
  for (size_t d = 0; d < box.offsets.size(); ++d) {
    out += (d ? ", " : "") + std::to_string(box.offsets[d]) + ":" +
           std::to_string(box.offsets[d] + box.lengths[d]);
  }
  return out + "]";
}

namespace {

// The slab recursion of find_tiling_problem. `lo`/`hi` hold the slab's interval in every
// dimension before the current one; later dimensions span the whole tensor.
class Tiler {
 public:
  Tiler(std::span<const int64_t> shape, std::span<const Box> boxes) : shape_(shape), boxes_(boxes) {}

  // The boxes `ids` all span the current slab in dimensions < dim; they must tile the rest.
  std::optional<TilingProblem> check(std::vector<size_t> ids, size_t dim) {
    if (dim == shape_.size()) return check_point(ids);
    std::sort(ids.begin(), ids.end(), [&](size_t a, size_t b) { return start(a, dim) < start(b, dim); });
    const std::vector<int64_t> cuts = breakpoints(ids, dim);
    std::vector<size_t> active;
    size_t next = 0;
    size_t before = TilingProblem::kNone;  // the last box to end at or before the interval
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const int64_t a = cuts[c], b = cuts[c + 1];
      std::erase_if(active, [&](size_t id) {
        if (end(id, dim) > a) return false;
        before = id;
        return true;
      });
      while (next < ids.size() && start(ids[next], dim) <= a) active.push_back(ids[next++]);
      if (active.empty()) {
        const size_t after = next < ids.size() ? ids[next] : TilingProblem::kNone;
        return gap(dim, a, b, before, after);
      }
      if (dim + 1 == shape_.size() && active.size() > 1) {
        return TilingProblem{true, std::min(active[0], active[1]), std::max(active[0], active[1]), {}};
      }
      if (dim + 1 < shape_.size()) {
        lo_.push_back(a);
        hi_.push_back(b);
        std::optional<TilingProblem> inner = check(active, dim + 1);
        lo_.pop_back();
        hi_.pop_back();
        if (inner) return inner;
      }
    }
    return std::nullopt;
  }

 private:
  int64_t start(size_t id, size_t dim) const { return boxes_[id].offsets[dim]; }
  int64_t end(size_t id, size_t dim) const {
    return boxes_[id].offsets[dim] + boxes_[id].lengths[dim];
  }

  // 0, the extent, and every box boundary in between, ascending and unique.
  std::vector<int64_t> breakpoints(const std::vector<size_t>& ids, size_t dim) const {
    std::vector<int64_t> cuts = {0, shape_[dim]};
    for (size_t id : ids) {
      cuts.push_back(start(id, dim));
      cuts.push_back(end(id, dim));
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    return cuts;
  }

  // A scalar tensor: exactly one (empty) box holds its one element.
  std::optional<TilingProblem> check_point(const std::vector<size_t>& ids) const {
    if (ids.size() == 1) return std::nullopt;
    if (ids.empty()) return TilingProblem{false, TilingProblem::kNone, TilingProblem::kNone, {}};
    return TilingProblem{true, std::min(ids[0], ids[1]), std::max(ids[0], ids[1]), {}};
  }

  // The uncovered box: the slab so far, [a, b) in `dim`, everything in later dimensions.
  TilingProblem gap(size_t dim, int64_t a, int64_t b, size_t before, size_t after) const {
    TilingProblem p{false, before, after, {}};
    for (size_t d = 0; d < shape_.size(); ++d) {
      const int64_t from = d < dim ? lo_[d] : d == dim ? a : 0;
      const int64_t to = d < dim ? hi_[d] : d == dim ? b : shape_[d];
      p.gap.offsets.push_back(from);
      p.gap.lengths.push_back(to - from);
    }
    return p;
  }

  std::span<const int64_t> shape_;
  std::span<const Box> boxes_;
  std::vector<int64_t> lo_, hi_;
};

}  // namespace

std::optional<TilingProblem> find_tiling_problem(std::span<const int64_t> shape,
                                                 std::span<const Box> boxes) {
  for (int64_t extent : shape) {
    if (extent == 0) {  // no elements: any box would lie outside, so none may exist
      if (boxes.empty()) return std::nullopt;
      return TilingProblem{true, 0, 0, {}};
    }
  }
  std::vector<size_t> ids(boxes.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i;
  return Tiler(shape, boxes).check(std::move(ids), 0);
}

namespace {

// Row-major element offset of global index `index` inside box `box`.
int64_t offset_in(const Box& box, const std::vector<int64_t>& index) {
  int64_t flat = 0;
  for (size_t d = 0; d < box.offsets.size(); ++d) {
    flat = flat * box.lengths[d] + (index[d] - box.offsets[d]);
  }
  return flat;
}

// OK when `inner` lies inside `outer` (same rank, every end computed without overflow).
bool inside(const Box& inner, const Box& outer) {
  if (inner.offsets.size() != outer.offsets.size() || inner.lengths.size() != inner.offsets.size() ||
      outer.lengths.size() != outer.offsets.size()) {
    return false;
  }
  for (size_t d = 0; d < inner.offsets.size(); ++d) {
    Result<int64_t> inner_end = checked_add(inner.offsets[d], inner.lengths[d], "box");
    Result<int64_t> outer_end = checked_add(outer.offsets[d], outer.lengths[d], "box");
    if (!inner_end.ok() || !outer_end.ok() || inner.offsets[d] < outer.offsets[d] ||
        *inner_end > *outer_end) {
      return false;
    }
  }
  return true;
}

// OK when `buffer_bytes` is exactly the row-major size of `box`.
Status check_buffer(const Box& box, size_t buffer_bytes, size_t element_size, const char* which) {
  MS_ASSIGN_OR_RETURN(const uint64_t bytes,
                      checked_nbytes(box.lengths, element_size, std::string(which) + " box"));
  if (bytes != buffer_bytes) {
    return InvalidArgument(std::string(which) + " box " + box_string(box) + " needs " +
                           std::to_string(bytes) + " bytes, its buffer holds " +
                           std::to_string(buffer_bytes));
  }
  return Status::OK();
}

}  // namespace

Status copy_region(const Box& region, const Box& src_box, std::span<const std::byte> src,
                   const Box& dst_box, std::span<std::byte> dst, size_t element_size) {
  if (!inside(region, src_box) || !inside(region, dst_box)) {
    return InvalidArgument("region " + box_string(region) + " is not inside both the source box " +
                           box_string(src_box) + " and the destination box " +
                           box_string(dst_box));
  }
  MS_RETURN_IF_ERROR(check_buffer(src_box, src.size(), element_size, "source"));
  MS_RETURN_IF_ERROR(check_buffer(dst_box, dst.size(), element_size, "destination"));
  const size_t rank = region.offsets.size();
  if (rank == 0) {
    std::memcpy(dst.data(), src.data(), element_size);
    return Status::OK();
  }
  const int64_t row = region.lengths[rank - 1];
  if (row == 0 || region.numel() == 0) return Status::OK();
  const int64_t rows = region.numel() / row;
  std::vector<int64_t> index = region.offsets;
  for (int64_t r = 0; r < rows; ++r) {
    const size_t bytes = static_cast<size_t>(row) * element_size;
    std::memcpy(dst.data() + static_cast<size_t>(offset_in(dst_box, index)) * element_size,
                src.data() + static_cast<size_t>(offset_in(src_box, index)) * element_size, bytes);
    for (size_t d = rank - 1; d-- > 0;) {  // next row: odometer over the outer dimensions
      if (++index[d] < region.offsets[d] + region.lengths[d]) break;
      index[d] = region.offsets[d];
    }
  }
  return Status::OK();
}

}  // namespace ms::ckpt
