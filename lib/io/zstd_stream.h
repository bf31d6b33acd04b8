// Streaming zstd over the File layer, for datasets and checkpoint shards too large to hold
// twice in memory: ZstdWriter compresses as data arrives and appends frames to a File;
// ZstdReader decompresses a File piece by piece. Damaged input is reported as Corruption naming
// the file and the compressed byte offset where decoding failed, so a user knows which file to
// restore. One-shot compress/decompress cover small buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/env.h"

typedef struct ZSTD_CCtx_s ZSTD_CCtx;
typedef struct ZSTD_DCtx_s ZSTD_DCtx;

namespace ms::io {

inline constexpr int kDefaultZstdLevel = 3;

// Appends one zstd frame to `file` (at its append offset). `file` must outlive the writer.
// Nothing is complete until finish() returns OK; after any error the writer is poisoned.
class ZstdWriter {
 public:
  explicit ZstdWriter(File& file, int level = kDefaultZstdLevel);
  ~ZstdWriter();
  ZstdWriter(const ZstdWriter&) = delete;
  ZstdWriter& operator=(const ZstdWriter&) = delete;

  // Compresses `data`, appending output to the file as buffers fill.
  Status write(std::span<const std::byte> data);
  Status write(std::string_view data) { return write(as_bytes(data)); }
  // Ends the frame and appends what remains. Does not sync or close the file.
  Status finish();

  uint64_t bytes_in() const { return bytes_in_; }
  uint64_t bytes_out() const { return bytes_out_; }

 private:
  Status compress(std::span<const std::byte> data, bool end);
  Status fail(Status status);

  File& file_;
  ZSTD_CCtx* ctx_;
  std::vector<std::byte> out_;
  uint64_t bytes_in_ = 0;
  uint64_t bytes_out_ = 0;
  Status error_;
  bool finished_ = false;
};

// Decompresses `file` from byte `start_offset` to its end; several concatenated frames read as
// one stream. `file` must outlive the reader.
class ZstdReader {
 public:
  explicit ZstdReader(File& file, uint64_t start_offset = 0);
  ~ZstdReader();
  ZstdReader(const ZstdReader&) = delete;
  ZstdReader& operator=(const ZstdReader&) = delete;

  // Fills `dest` as far as the stream allows; returns the count, 0 at end of stream. Corruption
  // naming the file and compressed offset for damaged data or a stream cut off mid-frame.
  Result<size_t> read(std::span<std::byte> dest);
  // Reads the rest of the stream.
  Result<std::string> read_all();

 private:
  Status refill();
  Status corruption(std::string_view what, uint64_t offset) const;

  File& file_;
  ZSTD_DCtx* ctx_;
  std::vector<std::byte> in_;
  size_t in_pos_ = 0;
  size_t in_end_ = 0;
  uint64_t in_file_offset_;  // file offset of in_[0]
  bool file_eof_ = false;
  bool started_ = false;     // some input has been decoded
  bool frame_open_ = false;  // decoder is inside a frame (more input needed to finish it)
  Status error_;
};

// One-shot helpers. decompress returns Corruption (with the byte offset) for damaged input.
std::string compress(std::string_view data, int level = kDefaultZstdLevel);
Result<std::string> decompress(std::string_view data);

// Decompresses `data` (one or more frames) into exactly `out`, for readers that know the raw
// size from elsewhere (a checkpoint shard's box): nothing is allocated from the frame's own
// claims. Corruption when a frame header claims another content size, when the data would
// yield more than out.size() bytes (a decompression bomb stops at the buffer's end) or fewer
// (truncated), or is not zstd.
Status decompress_exact(std::string_view data, std::span<std::byte> out);

}  // namespace ms::io
