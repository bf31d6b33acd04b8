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

Result<std::unique_ptr<BulkWriter>> BulkWriter::start(File& file, Options options) {
  bool direct = false;
  if (options.direct) {
    MS_ASSIGN_OR_RETURN(direct, file.enable_direct_writes());
  }
  return std::unique_ptr<BulkWriter>(new BulkWriter(file, std::move(options), direct));
}

BulkWriter::BulkWriter(File& file, Options options, bool direct)
    : file_(&file), options_(std::move(options)), direct_(direct) {
  options_.piece_bytes = std::max(kDirectIoAlignment, round_down(options_.piece_bytes));
  options_.queue_depth = std::max(options_.queue_depth, 0);
  // One buffer filling while queue_depth wait or are written; allocated on first use.
  bounces_.resize(static_cast<size_t>(options_.queue_depth) + 1);
  for (int i = static_cast<int>(bounces_.size()) - 1; i >= 0; --i) free_bounces_.push_back(i);
  if (options_.queue_depth > 0) writer_ = std::thread([this] { writer_loop(); });
}

BulkWriter::~BulkWriter() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Abandoned before finish(): skip what is still queued (its memory may be going away).
    if (error_.ok()) error_ = FailedPrecondition("'" + file_->path() + "': write abandoned");
    closing_ = true;
  }
  changed_.notify_all();
  writer_.join();
}

Status BulkWriter::write(const Piece& piece) {
  MS_RETURN_IF_ERROR(file_->write_at(piece.offset, piece.bytes));
  // Through the page cache the disk starts on this piece while the next is copied (as
  // dd conv=fsync does not); a direct write is on its way to the disk already.
  if (!direct_) MS_RETURN_IF_ERROR(file_->start_writeback(piece.offset, piece.bytes.size()));
  unsynced_ += piece.bytes.size();
  if (options_.sync_every_bytes > 0 && unsynced_ >= options_.sync_every_bytes) {
    unsynced_ = 0;
    MS_RETURN_IF_ERROR(file_->sync());
  }
  if (options_.after_piece) options_.after_piece(piece.bytes.size());
  return Status::OK();
}

void BulkWriter::writer_loop() {
  if (options_.on_writer_start) options_.on_writer_start();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock, [&] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) return;  // closing, and everything queued is written
    const Piece piece = queue_.front();
    queue_.pop_front();
    const bool skip = !error_.ok();  // after a failure nothing more reaches the file
    lock.unlock();
    Status status = skip ? Status::OK() : write(piece);
    lock.lock();
    if (!status.ok() && error_.ok()) error_ = std::move(status);
    if (piece.bounce >= 0) free_bounces_.push_back(piece.bounce);
    changed_.notify_all();
  }
}

Status BulkWriter::first_error() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

// Hands `bytes` (from bounce buffer `bounce`, or -1: the caller's memory) to the writer thread,
// or writes it here when there is none.
Status BulkWriter::submit(std::span<const std::byte> bytes, int bounce) {
  const Piece piece{queued_, bytes, bounce};
  queued_ += bytes.size();
  if (!writer_.joinable()) {
    Status status = error_.ok() ? write(piece) : error_;
    if (bounce >= 0) free_bounces_.push_back(bounce);
    if (!status.ok() && error_.ok()) error_ = status;
    return status;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.ok()) {
    if (bounce >= 0) free_bounces_.push_back(bounce);
    return error_;
  }
  queue_.push_back(piece);
  changed_.notify_all();
  return Status::OK();
}

// Makes a free bounce buffer the one being filled, waiting for the writer to free one.
Status BulkWriter::take_bounce() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return !free_bounces_.empty() || !error_.ok(); });
    if (!error_.ok()) return error_;
    current_ = free_bounces_.back();
    free_bounces_.pop_back();
  }
  fill_ = 0;
  Buffer& buffer = bounces_[static_cast<size_t>(current_)];
  if (buffer.empty()) {
    // Huge pages: a direct write pins its source's pages; the bounce buffers are reused.
    MS_ASSIGN_OR_RETURN(buffer,
                        Buffer::allocate(options_.piece_bytes, kDirectIoAlignment, Pages::kHuge));
  }
  return Status::OK();
}

// Submits the bounce buffer being filled; `pad` (direct, at the end only) rounds it up to whole
// blocks of zeros, which finish() cuts off again.
Status BulkWriter::flush_bounce(bool pad) {
  if (current_ < 0 || fill_ == 0) return Status::OK();
  uint64_t n = fill_;
  std::byte* data = bounces_[static_cast<size_t>(current_)].bytes().data();
  if (pad) {
    n = round_up(fill_);
    std::memset(data + fill_, 0, n - fill_);
    padding_ = n - fill_;
  }
  const int bounce = current_;
  current_ = -1;
  fill_ = 0;
  Status status = submit({data, n}, bounce);
  queued_ -= padding_;  // the padding is not part of the stream
  return status;
}

Status BulkWriter::append_copy(std::span<const std::byte> data) {
  while (!data.empty()) {
    if (current_ < 0) MS_RETURN_IF_ERROR(take_bounce());
    const size_t n = std::min<uint64_t>(options_.piece_bytes - fill_, data.size());
    std::memcpy(bounces_[static_cast<size_t>(current_)].bytes().data() + fill_, data.data(), n);
    fill_ += n;
    data = data.subspan(n);
    if (fill_ == options_.piece_bytes) MS_RETURN_IF_ERROR(flush_bounce(false));
  }
  return Status::OK();
}

Status BulkWriter::append(std::span<const std::byte> data) {
  const uint64_t piece = options_.piece_bytes;
  if (!direct_) {
    MS_RETURN_IF_ERROR(flush_bounce(false));  // copied bytes before this go first
    for (; !data.empty(); data = data.subspan(std::min<uint64_t>(piece, data.size()))) {
      MS_RETURN_IF_ERROR(submit(data.first(std::min<uint64_t>(piece, data.size())), -1));
    }
    return Status::OK();
  }
  while (!data.empty()) {
    // Aligned memory at an aligned file offset goes to the disk as it is: no copy at all.
    if (fill_ == 0 && aligned(data.data()) && data.size() >= kDirectIoAlignment) {
      const size_t n = std::min<uint64_t>(piece, round_down(data.size()));
      MS_RETURN_IF_ERROR(submit(data.first(n), -1));
      data = data.subspan(n);
      continue;
    }
    // Otherwise through a bounce buffer, up to its next flush (where the file offset is
    // aligned again and the rest may go in place).
    const size_t n = std::min<uint64_t>(piece - fill_, data.size());
    MS_RETURN_IF_ERROR(append_copy(data.first(n)));
    data = data.subspan(n);
  }
  return Status::OK();
}

Status BulkWriter::finish() {
  Status flushed = flush_bounce(direct_);
  if (writer_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    changed_.notify_all();
    writer_.join();
  }
  MS_RETURN_IF_ERROR(first_error());
  MS_RETURN_IF_ERROR(flushed);
  if (padding_ > 0) MS_RETURN_IF_ERROR(file_->truncate(queued_));
  return Status::OK();
}

}  // namespace ms::io
