// BulkWriter: one long sequential write, such as a checkpoint's data file, cut into pieces. Where
// the filesystem has direct I/O the pieces bypass the page cache: the disk reads them straight
// from the caller's memory when it is block-aligned, and from one aligned bounce buffer
// otherwise. A write through the page cache first copies every byte into freshly allocated
// cache pages and leaves the disk work to a later fsync; on the VMs this toolkit was measured on
// that copy ran at under 1 GB/s, and it takes memory bandwidth from the training running beside
// an asynchronous save (docs/checkpoint.md, "Direct writes"). Where direct I/O is refused (tmpfs,
// or switched off) the pieces go through the page cache, each piece's writeback started as soon
// as it is written, so the final fsync waits only for the tail.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

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
    // Called after each piece is written with its byte count, e.g. to pace the writes.
    std::function<void(uint64_t bytes)> after_piece;
  };

  // `file` is freshly created and empty, and outlives the writer. Fails only when switching
  // direct I/O on fails for another reason than the filesystem lacking it.
  static Result<BulkWriter> start(File& file, Options options);

  // Appends `data` at offset(). A failed write leaves the file undefined past the last piece
  // written; the caller discards it.
  Status append(std::span<const std::byte> data);
  Status append(std::string_view data) { return append(as_bytes(data)); }
  // Writes what is still buffered (a direct writer pads its last block with zeros and cuts the
  // file back to offset()). Does not sync: durability is the caller's File::sync().
  Status finish();

  // Bytes appended so far: where the next append lands in the file.
  uint64_t offset() const { return written_ + fill_; }
  bool direct() const { return direct_; }

 private:
  BulkWriter(File& file, Options options, bool direct);
  Status write_piece(std::span<const std::byte> piece);
  Status flush_bounce();

  File* file_;
  Options options_;
  bool direct_;
  uint64_t written_ = 0;  // bytes handed to the file (direct: always block-aligned)
  Buffer bounce_;         // direct only: the unaligned bytes waiting for a full piece
  uint64_t fill_ = 0;     // bytes waiting in bounce_
};

}  // namespace ms::io
