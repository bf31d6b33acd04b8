// Streaming zstd on Files; see zstd_stream.h. Frames carry zstd's content checksum, so a flipped
// byte is caught even where it still decodes.
#include "io/zstd_stream.h"

#include <zstd.h>

#include <cassert>

namespace ms::io {

namespace {

ZSTD_CCtx* new_compressor(int level) {
  ZSTD_CCtx* ctx = ZSTD_createCCtx();
  assert(ctx != nullptr && "out of memory creating a zstd context");
  ZSTD_CCtx_setParameter(ctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(ctx, ZSTD_c_checksumFlag, 1);
  return ctx;
}

ZSTD_DCtx* new_decompressor() {
  ZSTD_DCtx* ctx = ZSTD_createDCtx();
  assert(ctx != nullptr && "out of memory creating a zstd context");
  return ctx;
}

Status damaged(std::string_view what, std::string_view name, uint64_t offset,
               std::string_view detail) {
  return Corruption("zstd " + std::string(what) + " " + std::string(name) + " is damaged at byte " +
                    std::to_string(offset) + ": " + std::string(detail) +
                    "; rewrite it or restore it from a good copy");
}

}  // namespace

ZstdWriter::ZstdWriter(File& file, int level)
    : file_(file), ctx_(new_compressor(level)), out_(ZSTD_CStreamOutSize()) {}

ZstdWriter::~ZstdWriter() { ZSTD_freeCCtx(ctx_); }

Status ZstdWriter::write(std::span<const std::byte> data) {
  if (!error_.ok()) return error_;
  assert(!finished_ && "write after finish");
  bytes_in_ += data.size();
  return compress(data, false);
}

Status ZstdWriter::finish() {
  if (!error_.ok()) return error_;
  assert(!finished_ && "finish called twice");
  MS_RETURN_IF_ERROR(compress({}, true));
  finished_ = true;
  return Status::OK();
}

// Feeds `data` to the compressor and appends every full output buffer; with `end` it also
// flushes the frame epilogue.
Status ZstdWriter::compress(std::span<const std::byte> data, bool end) {
  ZSTD_inBuffer in{data.data(), data.size(), 0};
  for (;;) {
    ZSTD_outBuffer out{out_.data(), out_.size(), 0};
    size_t remaining = ZSTD_compressStream2(ctx_, &out, &in, end ? ZSTD_e_end : ZSTD_e_continue);
    if (ZSTD_isError(remaining)) {
      return fail(Internal("zstd compression into '" + file_.path() +
                           "' failed: " + ZSTD_getErrorName(remaining)));
    }
    if (out.pos > 0) {
      Status appended = file_.append(std::span<const std::byte>(out_.data(), out.pos));
      if (!appended.ok()) return fail(appended);
      bytes_out_ += out.pos;
    }
    bool done = end ? remaining == 0 : in.pos == in.size;
    if (done) return Status::OK();
  }
}

Status ZstdWriter::fail(Status status) {
  error_ = std::move(status);
  return error_;
}

ZstdReader::ZstdReader(File& file, uint64_t start_offset)
    : file_(file),
      ctx_(new_decompressor()),
      in_(ZSTD_DStreamInSize()),
      in_file_offset_(start_offset) {}

ZstdReader::~ZstdReader() { ZSTD_freeDCtx(ctx_); }

Status ZstdReader::refill() {
  in_file_offset_ += in_end_;
  in_pos_ = 0;
  in_end_ = 0;
  MS_ASSIGN_OR_RETURN(size_t got, file_.read_at(in_file_offset_, in_));
  in_end_ = got;
  file_eof_ = got < in_.size();
  return Status::OK();
}

Status ZstdReader::corruption(std::string_view what, uint64_t offset) const {
  return damaged("stream", "'" + file_.path() + "'", offset, what);
}

Result<size_t> ZstdReader::read(std::span<std::byte> dest) {
  if (!error_.ok()) return error_;
  ZSTD_outBuffer out{dest.data(), dest.size(), 0};
  while (out.pos < out.size) {
    if (in_pos_ == in_end_ && !file_eof_) {
      Status refilled = refill();
      if (!refilled.ok()) return error_ = refilled;
    }
    bool input_exhausted = in_pos_ == in_end_ && file_eof_;
    uint64_t position = in_file_offset_ + in_pos_;
    if (input_exhausted && !frame_open_) {
      if (!started_) return error_ = corruption("the file holds no zstd frame", position);
      break;
    }
    size_t produced_before = out.pos;
    ZSTD_inBuffer in{in_.data(), in_end_, in_pos_};
    size_t ret = ZSTD_decompressStream(ctx_, &out, &in);
    in_pos_ = in.pos;
    if (ZSTD_isError(ret)) {
      return error_ = corruption(ZSTD_getErrorName(ret), in_file_offset_ + in_pos_);
    }
    started_ = true;
    frame_open_ = ret != 0;
    if (input_exhausted && frame_open_ && out.pos == produced_before) {
      return error_ = corruption("the stream ends inside a frame (truncated)", position);
    }
  }
  return out.pos;
}

Result<std::string> ZstdReader::read_all() {
  std::string data;
  constexpr size_t kChunk = size_t{1} << 16;
  for (;;) {
    size_t old_size = data.size();
    data.resize(old_size + kChunk);
    MS_ASSIGN_OR_RETURN(
        size_t got, read(std::as_writable_bytes(std::span<char>(data.data() + old_size, kChunk))));
    data.resize(old_size + got);
    if (got == 0) return data;
  }
}

std::string compress(std::string_view data, int level) {
  ZSTD_CCtx* ctx = new_compressor(level);
  std::string out(ZSTD_compressBound(data.size()), '\0');
  size_t n = ZSTD_compress2(ctx, out.data(), out.size(), data.data(), data.size());
  ZSTD_freeCCtx(ctx);
  assert(!ZSTD_isError(n) && "zstd compression into a bound-sized buffer cannot fail");
  out.resize(n);
  return out;
}

Result<std::string> decompress(std::string_view data) {
  if (data.empty()) return damaged("buffer", "of 0 bytes", 0, "it holds no zstd frame");
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(new_decompressor(), &ZSTD_freeDCtx);
  std::string out;
  unsigned long long expected = ZSTD_getFrameContentSize(data.data(), data.size());
  size_t chunk = ZSTD_DStreamOutSize();
  if (expected != ZSTD_CONTENTSIZE_UNKNOWN && expected != ZSTD_CONTENTSIZE_ERROR) {
    out.reserve(static_cast<size_t>(expected));
  }
  ZSTD_inBuffer in{data.data(), data.size(), 0};
  size_t ret = 0;
  std::string name = "of " + std::to_string(data.size()) + " bytes";
  while (in.pos < in.size || ret != 0) {
    size_t old_size = out.size();
    out.resize(old_size + chunk);
    ZSTD_outBuffer dest{out.data() + old_size, chunk, 0};
    size_t before = in.pos;
    ret = ZSTD_decompressStream(ctx.get(), &dest, &in);
    out.resize(old_size + dest.pos);
    if (ZSTD_isError(ret)) return damaged("buffer", name, in.pos, ZSTD_getErrorName(ret));
    bool stalled = in.pos == before && dest.pos == 0;
    if (in.pos == in.size && ret != 0 && stalled) {
      return damaged("buffer", name, in.pos, "the data ends inside a frame (truncated)");
    }
  }
  return out;
}

namespace {

// After `out` is full: OK only when the input ends exactly there (no further byte decodes and
// the last frame is complete).
Status check_nothing_more(ZSTD_DCtx* ctx, ZSTD_inBuffer& in, size_t ret, size_t want,
                          const std::string& name) {
  std::byte extra;
  while (ret != 0 || in.pos < in.size) {
    ZSTD_outBuffer spill{&extra, 1, 0};
    const size_t before = in.pos;
    ret = ZSTD_decompressStream(ctx, &spill, &in);
    if (ZSTD_isError(ret)) return damaged("buffer", name, in.pos, ZSTD_getErrorName(ret));
    if (spill.pos > 0) {
      return damaged("buffer", name, in.pos,
                     "it decompresses to more than the " + std::to_string(want) + " bytes expected");
    }
    if (in.pos == before && ret != 0) {
      return damaged("buffer", name, in.pos, "the data ends inside a frame (truncated)");
    }
  }
  return Status::OK();
}

}  // namespace

Status decompress_exact(std::string_view data, std::span<std::byte> out) {
  const std::string name = "of " + std::to_string(data.size()) + " bytes";
  const unsigned long long claimed = ZSTD_getFrameContentSize(data.data(), data.size());
  if (data.empty() || claimed == ZSTD_CONTENTSIZE_ERROR) {
    return damaged("buffer", name, 0, "it does not start with a zstd frame");
  }
  if (claimed != ZSTD_CONTENTSIZE_UNKNOWN && claimed > out.size()) {
    return damaged("buffer", name, 0, "its frame claims " + std::to_string(claimed) +
                                          " bytes, more than the " + std::to_string(out.size()) +
                                          " expected");
  }
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(new_decompressor(), &ZSTD_freeDCtx);
  ZSTD_inBuffer in{data.data(), data.size(), 0};
  ZSTD_outBuffer dest{out.data(), out.size(), 0};
  size_t ret = 1;
  while (dest.pos < dest.size) {
    const size_t in_before = in.pos, out_before = dest.pos;
    ret = ZSTD_decompressStream(ctx.get(), &dest, &in);
    if (ZSTD_isError(ret)) return damaged("buffer", name, in.pos, ZSTD_getErrorName(ret));
    const bool stalled = in.pos == in_before && dest.pos == out_before;
    if (in.pos == in.size && (ret == 0 || stalled)) break;
  }
  if (dest.pos < dest.size) {
    return damaged("buffer", name, in.pos, "it decompresses to " + std::to_string(dest.pos) +
                                               " bytes, " + std::to_string(dest.size) +
                                               " expected (truncated)");
  }
  return check_nothing_more(ctx.get(), in, ret, out.size(), name);
}

}  // namespace ms::io
