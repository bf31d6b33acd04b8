// BulkWriter; see bulk_writer.h.
#include "io/bulk_writer.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace ms::io {

namespace {

uint64_t round_down(uint64_t n) { return n - n % kDirectIoAlignment; }
uint64_t round_up(uint64_t n) { return round_down(n + kDirectIoAlignment - 1); }

bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kDirectIoAlignment == 0;
}

}  // namespace

Result<BulkWriter> BulkWriter::start(File& file, Options options) {
  bool direct = false;
  if (options.direct) {
    MS_ASSIGN_OR_RETURN(direct, file.enable_direct_writes());
  }
  return BulkWriter(file, std::move(options), direct);
}

BulkWriter::BulkWriter(File& file, Options options, bool direct)
    : file_(&file), options_(std::move(options)), direct_(direct) {
  options_.piece_bytes = std::max(kDirectIoAlignment, round_down(options_.piece_bytes));
}

Status BulkWriter::write_piece(std::span<const std::byte> piece) {
  MS_RETURN_IF_ERROR(file_->write_at(written_, piece));
  // Through the page cache the disk starts on this piece while the next is copied (as
  // dd conv=fsync does not); a direct write is on its way to the disk already.
  if (!direct_) MS_RETURN_IF_ERROR(file_->start_writeback(written_, piece.size()));
  written_ += piece.size();
  if (options_.after_piece) options_.after_piece(piece.size());
  return Status::OK();
}

Status BulkWriter::append(std::span<const std::byte> data) {
  const uint64_t piece = options_.piece_bytes;
  if (!direct_) {
    while (!data.empty()) {
      const size_t n = std::min<uint64_t>(piece, data.size());
      MS_RETURN_IF_ERROR(write_piece(data.first(n)));
      data = data.subspan(n);
    }
    return Status::OK();
  }
  while (!data.empty()) {
    // Aligned memory at an aligned file offset goes to the disk as it is: no copy at all.
    if (fill_ == 0 && aligned(data.data()) && data.size() >= kDirectIoAlignment) {
      const size_t n = std::min<uint64_t>(piece, round_down(data.size()));
      MS_RETURN_IF_ERROR(write_piece(data.first(n)));
      data = data.subspan(n);
      continue;
    }
    if (bounce_.empty()) {
      MS_ASSIGN_OR_RETURN(bounce_, Buffer::allocate(piece, kDirectIoAlignment));
    }
    const size_t n = std::min<uint64_t>(piece - fill_, data.size());
    std::memcpy(bounce_.bytes().data() + fill_, data.data(), n);
    fill_ += n;
    data = data.subspan(n);
    if (fill_ == piece) MS_RETURN_IF_ERROR(flush_bounce());
  }
  return Status::OK();
}

// Writes the bounce buffer; a partial one (only at finish) is padded to whole blocks.
Status BulkWriter::flush_bounce() {
  if (fill_ == 0) return Status::OK();
  const uint64_t padded = round_up(fill_);
  std::memset(bounce_.bytes().data() + fill_, 0, padded - fill_);
  const uint64_t kept = fill_;
  fill_ = 0;
  MS_RETURN_IF_ERROR(write_piece(bounce_.bytes().first(padded)));
  written_ -= padded - kept;  // the padding is not part of the stream
  return Status::OK();
}

Status BulkWriter::finish() {
  if (!direct_ || fill_ == 0) return Status::OK();
  const bool padded = fill_ % kDirectIoAlignment != 0;
  MS_RETURN_IF_ERROR(flush_bounce());
  if (padded) MS_RETURN_IF_ERROR(file_->truncate(written_));
  return Status::OK();
}

}  // namespace ms::io
