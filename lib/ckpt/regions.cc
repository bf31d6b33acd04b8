// Box decomposition and copying; see regions.h.
#include "ckpt/regions.h"

#include <algorithm>
#include <cstring>

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

namespace {

// Row-major element offset of global index `index` inside box `box`.
int64_t offset_in(const Box& box, const std::vector<int64_t>& index) {
  int64_t flat = 0;
  for (size_t d = 0; d < box.offsets.size(); ++d) {
    flat = flat * box.lengths[d] + (index[d] - box.offsets[d]);
  }
  return flat;
}

}  // namespace

void copy_region(const Box& region, const Box& src_box, const std::byte* src, const Box& dst_box,
                 std::byte* dst, size_t element_size) {
  const size_t rank = region.offsets.size();
  if (rank == 0) {
    std::memcpy(dst, src, element_size);
    return;
  }
  const int64_t row = region.lengths[rank - 1];
  const int64_t rows = region.numel() / std::max<int64_t>(row, 1);
  std::vector<int64_t> index = region.offsets;
  for (int64_t r = 0; r < rows; ++r) {
    const size_t bytes = static_cast<size_t>(row) * element_size;
    std::memcpy(dst + static_cast<size_t>(offset_in(dst_box, index)) * element_size,
                src + static_cast<size_t>(offset_in(src_box, index)) * element_size, bytes);
    for (size_t d = rank - 1; d-- > 0;) {  // next row: odometer over the outer dimensions
      if (++index[d] < region.offsets[d] + region.lengths[d]) break;
      index[d] = region.offsets[d];
    }
  }
}

}  // namespace ms::ckpt
