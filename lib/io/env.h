// The file layer every module reads and writes through, after leveldb's Env: a File offers
// positional and sequential reads, positional writes and appends, sync, size and close; an Env
// opens files and does the directory work (create, rename, remove, list, fsync a directory).
// Code that saves or loads data takes an Env& so tests can substitute a FaultInjectingEnv.
// The default Env reads and writes through io_uring when the kernel allows it and falls back to
// pread/pwrite at run time when it does not (see posix_env.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ms::io {

enum class OpenMode {
  kRead,       // read only; NotFound when missing
  kTruncate,   // read-write; created if missing, emptied if present
  kCreateNew,  // read-write; AlreadyExists when present (temporary files)
  kReadWrite,  // read-write; created if missing, contents kept, appends go to the end
};

// What a file whose writes bypass the page cache (File::enable_direct_writes) needs of every
// write: its offset, length and buffer address multiples of this many bytes. 4096 covers the
// logical block size of every disk Linux drives today (512 or 4096).
constexpr uint64_t kDirectIoAlignment = 4096;

// What an open descriptor refers to (fstat's file type), so a reader that expects a regular file
// can refuse a FIFO, a device or a directory by name instead of blocking or reading forever.
enum class FileKind { kRegular, kDirectory, kFifo, kCharDevice, kBlockDevice, kSocket, kOther };

// The kind of a stat's st_mode, for readers that open a descriptor themselves (mmap).
FileKind file_kind_of_mode(uint32_t st_mode);
// "a FIFO", "a character device", ...: for messages.
std::string_view file_kind_name(FileKind kind);

inline std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// One open file. Reads and writes handle short transfers and EINTR internally: a write either
// stores all bytes or returns an error; a read returns fewer bytes than asked only at end of file.
// Positional reads may be issued from several threads at once; writes, appends and the
// sequential cursor belong to one thread at a time.
class File {
 public:
  virtual ~File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }

  // Reads up to dest.size() bytes at `offset` into dest; returns the count (short only at EOF).
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> dest) {
    return do_read_at(offset, dest);
  }
  // Reads at the sequential cursor (starts at 0) and advances it; returns 0 at end of file.
  Result<size_t> read(std::span<std::byte> dest);
  void seek(uint64_t offset) { read_offset_ = offset; }

  // Writes all of `data` at `offset`; on failure some prefix may have been written.
  Status write_at(uint64_t offset, std::span<const std::byte> data) {
    return do_write_at(offset, data);
  }
  Status write_at(uint64_t offset, std::string_view data) {
    return write_at(offset, as_bytes(data));
  }
  // Writes at the append offset (end of the file as opened) and advances it on success.
  Status append(std::span<const std::byte> data);
  Status append(std::string_view data) { return append(as_bytes(data)); }
  uint64_t append_offset() const { return append_offset_; }

  // Flushes data and metadata to stable storage (fsync).
  Status sync() { return do_sync(); }
  // Starts writing [offset, offset + bytes) back to storage without waiting for it (Linux
  // sync_file_range with SYNC_FILE_RANGE_WRITE), so a long sequential write keeps the disk busy
  // while it copies instead of leaving every byte to sync(). Only a hint: durability still
  // takes sync(). A no-op where unsupported.
  Status start_writeback(uint64_t offset, uint64_t bytes) {
    return do_start_writeback(offset, bytes);
  }
  // Switches this file's writes to bypass the page cache (O_DIRECT): the disk reads them
  // straight from the caller's memory, so a large write costs neither a copy nor page-cache
  // memory, and durability still takes sync(). From then on every write's offset, length and
  // buffer address must be multiples of kDirectIoAlignment (reads too). False, and the file
  // unchanged, where the filesystem has no direct I/O (tmpfs on older kernels) or the file is
  // not a plain descriptor.
  Result<bool> enable_direct_writes() { return do_enable_direct_writes(); }
  // Cuts the file to `size` bytes, or extends it with zeros (ftruncate): a direct writer pads
  // its last block to the alignment and cuts the padding off here.
  Status truncate(uint64_t size) { return do_truncate(size); }
  Result<uint64_t> size() { return do_size(); }
  // What the file is (fstat). Files that wrap another forward to it; the base answers kRegular.
  Result<FileKind> kind() { return do_kind(); }
  // Releases the descriptor; later calls fail. Destruction closes silently if still open.
  Status close() { return do_close(); }

 protected:
  File(std::string path, uint64_t append_offset)
      : path_(std::move(path)), append_offset_(append_offset) {}

  virtual Result<size_t> do_read_at(uint64_t offset, std::span<std::byte> dest) = 0;
  virtual Status do_write_at(uint64_t offset, std::span<const std::byte> data) = 0;
  virtual Status do_sync() = 0;
  virtual Status do_start_writeback(uint64_t /*offset*/, uint64_t /*bytes*/) {
    return Status::OK();
  }
  virtual Result<bool> do_enable_direct_writes() { return false; }
  virtual Status do_truncate(uint64_t /*size*/) {
    return FailedPrecondition("cannot truncate '" + path_ + "': not supported by this file");
  }
  virtual Result<uint64_t> do_size() = 0;
  virtual Result<FileKind> do_kind() { return FileKind::kRegular; }
  virtual Status do_close() = 0;

 private:
  std::string path_;
  uint64_t append_offset_ = 0;
  uint64_t read_offset_ = 0;
};

// One read of a batch: `dest.size()` bytes at `offset` into caller-owned `dest`.
struct ReadRange {
  uint64_t offset = 0;
  std::span<std::byte> dest;
};

class Env {
 public:
  virtual ~Env() = default;

  // Opens `path`. NotFound when kRead and it is missing; AlreadyExists for kCreateNew when it
  // exists; IOError naming the path otherwise. An open never waits for a FIFO's writer (kRead
  // opens non-blocking; reads from a FIFO or device then block as usual).
  virtual Result<std::unique_ptr<File>> open(const std::string& path, OpenMode mode) = 0;

  // Fills every range from `file`; each must lie wholly inside the file, otherwise Corruption
  // naming the file and offset (a file shorter than its index promises). The default reads one
  // range after another; the io_uring backend submits them together.
  virtual Status read_ranges(File& file, std::span<const ReadRange> ranges);

  // Creates one directory; OK when it already exists as a directory.
  virtual Status create_dir(const std::string& path) = 0;
  // Creates `path` and any missing parents.
  Status create_dirs(const std::string& path);
  // rename(2): atomically replaces `to` (a file, or an empty directory) with `from`.
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // Removes a file; NotFound when it is missing.
  virtual Status remove_file(const std::string& path) = 0;
  // Removes an empty directory.
  virtual Status remove_dir(const std::string& path) = 0;
  // Removes a file or a directory tree; OK when nothing is there. Never follows a symbolic
  // link: a link, at `path` or anywhere below it, is removed as a link and what it points to is
  // left alone, so cleaning one tree cannot delete another through a link planted in it.
  Status remove_all(const std::string& path);
  // Entry names of a directory, without "." and "..", sorted.
  virtual Result<std::vector<std::string>> list_dir(const std::string& path) = 0;
  // Whether anything is at `path`; a dangling symbolic link counts (lstat).
  virtual bool exists(const std::string& path) = 0;
  // Whether `path` is a directory or a symbolic link to one (stat).
  virtual bool is_directory(const std::string& path) = 0;
  // Whether `path` itself is a symbolic link, whatever it points to (lstat).
  virtual bool is_symlink(const std::string& path) = 0;
  // fsyncs a directory so renames and creations inside it are durable.
  virtual Status sync_dir(const std::string& path) = 0;

  // "io_uring" or "pread/pwrite" for the default Env; wrappers report their inner Env's.
  virtual std::string_view backend_name() const = 0;
};

enum class IoBackend { kAuto, kPosix, kUring };

// A POSIX Env with the chosen read/write backend. kAuto uses io_uring when it initializes and
// pread/pwrite otherwise; kUring returns Unavailable (with the reason) when io_uring cannot be
// used here; kPosix always succeeds.
Result<std::unique_ptr<Env>> new_posix_env(IoBackend backend);

// Parses MS_IO_BACKEND values: "posix", "uring", "auto" or empty. InvalidArgument otherwise.
Result<IoBackend> parse_io_backend(std::string_view text);

// A POSIX Env whose backend MS_IO_BACKEND=posix|uring|auto chooses (auto when unset). A forced
// io_uring that cannot start, or an unknown value, logs a warning and falls back; the choice is
// logged at debug level.
std::unique_ptr<Env> new_env_from_environment();

// The process-wide Env: new_env_from_environment() on first use, kept until exit.
Env& default_env();

// Corruption naming the file and offset when a batched read got `got` < range.dest.size() bytes.
Status check_range_filled(const File& file, const ReadRange& range, size_t got);

// Parent directory of `path` ("." for a bare name).
std::string parent_dir(const std::string& path);

}  // namespace ms::io
