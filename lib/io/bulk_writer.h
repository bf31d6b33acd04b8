// BulkWriter: one long sequential write, such as a checkpoint's data file, cut into pieces that a
// writer thread hands to the file while the caller goes on (copying the next piece, checksumming
// what it queued). Where the filesystem has direct I/O the pieces bypass the page cache: the
// disk reads them straight from the caller's memory when it is block-aligned, and from aligned
// bounce buffers otherwise. A write through the page cache first copies every byte into freshly
// allocated cache pages and leaves the disk work to a later fsync; on the VMs this toolkit was
// measured on that copy ran at under 1 GB/s, and it takes memory bandwidth from the training
// running beside an asynchronous save (docs/checkpoint.md, "Direct writes"). Where direct I/O is
// refused (tmpfs, or switched off) the pieces go through the page cache, each piece's writeback
// started as soon as it is written, so the final fsync waits only for the tail.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "core/buffer.h"
#include "io/env.h"

namespace ms::io {

class BulkWriter {
 public:
  struct Options {
    // Bytes per write; rounded down to a multiple of kDirectIoAlignment (at least one block).
    uint64_t piece_bytes = 8ull << 20;
    // Try direct I/O (File::enable_direct_writes); false writes through the page cache.
    bool direct = true;
    // Bounce buffers the copied bytes rotate through: up to this many copied pieces wait for
    // or are in the writer thread while the caller fills the next. 0 writes every piece on
    // the caller's thread as it is formed (no writer thread).
    int queue_depth = 2;
    // After every this many bytes written (0: never), fsync the file on the writing thread. A
    // write, direct or not, may sit in a volatile cache below the filesystem (a virtual disk
    // over its host's page cache) until an fsync flushes it; flushing in stages while the
    // caller goes on leaves the caller's final sync only the tail. A failed fsync fails the
    // write like a failed write.
    uint64_t sync_every_bytes = 0;
    // Called after each piece is written, with its byte count, on the thread that wrote it
    // (e.g. to pace the writes: sleeping there holds the writes back, not the caller).
    std::function<void(uint64_t bytes)> after_piece;
    // Run first on the writer thread (e.g. to lower its CPU and I/O priority, which Linux sets
    // per thread, while the caller's thread keeps its own).
    std::function<void()> on_writer_start;
  };

  // `file` is freshly created and empty, and outlives the writer. Fails only when switching
  // direct I/O on fails for another reason than the filesystem lacking it.
  static Result<std::unique_ptr<BulkWriter>> start(File& file, Options options);
  // Waits for the pieces in flight (their errors are lost: call finish() to see them).
  ~BulkWriter();
  BulkWriter(const BulkWriter&) = delete;
  BulkWriter& operator=(const BulkWriter&) = delete;

  // Appends `data`, which must stay unchanged until finish() returns: it is written in place
  // where it can be. Returns at once for in-place pieces; the first write error shows at a
  // later append or at finish().
  Status append(std::span<const std::byte> data);
  // Appends a copy of `data` (through the bounce buffers), so it may change once this returns.
  Status append_copy(std::span<const std::byte> data);
  Status append_copy(std::string_view data) { return append_copy(as_bytes(data)); }
  // Writes what is still buffered and waits for every piece (a direct writer pads its last
  // block with zeros and cuts the file back to offset()). Returns the first error of any
  // write. Does not sync: durability is the caller's File::sync(). Call once, last.
  Status finish();

  // Bytes appended so far: where the next append lands in the file.
  uint64_t offset() const { return queued_ + fill_; }
  bool direct() const { return direct_; }

 private:
  // One write: `bytes` at `offset`, from bounce buffer `bounce` (or the caller's memory: -1).
  struct Piece {
    uint64_t offset = 0;
    std::span<const std::byte> bytes;
    int bounce = -1;
  };

  BulkWriter(File& file, Options options, bool direct);
  Status submit(std::span<const std::byte> bytes, int bounce);
  Status flush_bounce(bool pad);
  Status take_bounce();
  Status write(const Piece& piece);
  void writer_loop();
  Status first_error();

  File* file_;
  Options options_;
  bool direct_;
  uint64_t queued_ = 0;  // bytes submitted for writing (direct: block-aligned until finish)
  std::vector<Buffer> bounces_;
  int current_ = -1;      // the bounce buffer being filled, or -1
  uint64_t fill_ = 0;     // bytes waiting in it
  uint64_t padding_ = 0;  // zeros after the stream in the last direct piece
  uint64_t unsynced_ = 0;  // bytes written since the last staged fsync (by the writing thread)

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Piece> queue_;          // submitted, not yet taken by the writer thread
  std::vector<int> free_bounces_;    // bounce buffers neither filling, queued nor in writing
  bool closing_ = false;
  bool idle_ = true;                 // the writer thread holds no piece
  Status error_;                     // the first failed write
  std::thread writer_;
};

}  // namespace ms::io
