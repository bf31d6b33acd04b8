// The default Env: POSIX descriptors, with data transfers through io_uring when the kernel allows
// it and through pread/pwrite otherwise. Containers often forbid io_uring (seccomp turns
// io_uring_setup into EPERM, old kernels give ENOSYS), so the choice is made once at run time
// rather than at build time; directory operations are plain system calls on either backend.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>

#include "core/logging.h"
#include "io/env.h"
#include "io/posix_io.h"
#include "io/uring_queue.h"

namespace ms::io {

namespace {

constexpr unsigned kUringDepth = 64;

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, uint64_t append_offset, std::shared_ptr<UringQueue> uring)
      : File(std::move(path), append_offset), fd_(fd), uring_(std::move(uring)) {}
  ~PosixFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  // Batched reads through the ring; only reached when this file uses io_uring.
  Status read_batch(std::span<const ReadRange> ranges) {
    MS_RETURN_IF_ERROR(check_open());
    std::vector<UringQueue::BatchRead> reads;
    reads.reserve(ranges.size());
    for (const ReadRange& r : ranges) reads.push_back({r.offset, r.dest});
    MS_RETURN_IF_ERROR(uring_->read_batch(fd_, path(), reads));
    for (size_t i = 0; i < ranges.size(); ++i) {
      MS_RETURN_IF_ERROR(check_range_filled(*this, ranges[i], reads[i].done));
    }
    return Status::OK();
  }
  bool uses_uring() const { return uring_ != nullptr; }

 protected:
  Result<size_t> do_read_at(uint64_t offset, std::span<std::byte> dest) override {
    MS_RETURN_IF_ERROR(check_open());
    if (uring_) return uring_->read(fd_, path(), offset, dest);
    return pread_full(real_sys_io(), fd_, path(), offset, dest);
  }
  Status do_write_at(uint64_t offset, std::span<const std::byte> data) override {
    MS_RETURN_IF_ERROR(check_open());
    if (uring_) return uring_->write(fd_, path(), offset, data);
    return pwrite_full(real_sys_io(), fd_, path(), offset, data);
  }
  Status do_sync() override {
    MS_RETURN_IF_ERROR(check_open());
    if (::fsync(fd_) != 0) return ErrnoError("fsync", path(), errno);
    return Status::OK();
  }
  Status do_start_writeback(uint64_t offset, uint64_t bytes) override {
    MS_RETURN_IF_ERROR(check_open());
    if (::sync_file_range(fd_, static_cast<off64_t>(offset), static_cast<off64_t>(bytes),
                          SYNC_FILE_RANGE_WRITE) == 0) {
      return Status::OK();
    }
    // Filesystems without it (EINVAL, ESPIPE, ENOSYS) fall back to sync() doing all the work.
    if (errno == EINVAL || errno == ESPIPE || errno == ENOSYS) return Status::OK();
    return ErrnoError("sync_file_range", path(), errno);
  }
  Result<bool> do_enable_direct_writes() override {
    MS_RETURN_IF_ERROR(check_open());
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0) return ErrnoError("fcntl F_GETFL", path(), errno);
    if (::fcntl(fd_, F_SETFL, flags | O_DIRECT) == 0) return true;
    // A filesystem without direct I/O refuses the flag and leaves the descriptor as it was.
    if (errno == EINVAL || errno == ENOTSUP) return false;
    return ErrnoError("fcntl F_SETFL O_DIRECT", path(), errno);
  }
  Status do_truncate(uint64_t size) override {
    MS_RETURN_IF_ERROR(check_open());
    int rc;
    do {
      rc = ::ftruncate(fd_, static_cast<off_t>(size));
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) return ErrnoError("truncate", path(), errno);
    return Status::OK();
  }
  Result<uint64_t> do_size() override {
    MS_RETURN_IF_ERROR(check_open());
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return ErrnoError("stat", path(), errno);
    return static_cast<uint64_t>(st.st_size);
  }
  Result<FileKind> do_kind() override {
    MS_RETURN_IF_ERROR(check_open());
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return ErrnoError("stat", path(), errno);
    return file_kind_of_mode(st.st_mode);
  }
  Status do_close() override {
    MS_RETURN_IF_ERROR(check_open());
    int fd = fd_;
    fd_ = -1;
    // Linux releases the descriptor even when close reports an error, so it is not retried.
    if (::close(fd) != 0) return ErrnoError("close", path(), errno);
    return Status::OK();
  }

 private:
  Status check_open() const {
    if (fd_ < 0) return FailedPrecondition("'" + path() + "' is already closed");
    return Status::OK();
  }

  int fd_;
  std::shared_ptr<UringQueue> uring_;
};

// A read-only open of a FIFO without O_NONBLOCK waits until some process opens it for writing,
// possibly forever; with it the open returns at once. Reads keep their blocking behaviour:
// clear_nonblocking() drops the flag again after the open.
int open_flags(OpenMode mode) {
  switch (mode) {
    case OpenMode::kRead:
      return O_RDONLY | O_NONBLOCK;
    case OpenMode::kTruncate:
      return O_RDWR | O_CREAT | O_TRUNC;
    case OpenMode::kCreateNew:
      return O_RDWR | O_CREAT | O_EXCL;
    case OpenMode::kReadWrite:
      return O_RDWR | O_CREAT;
  }
  return O_RDONLY;
}

Status clear_nonblocking(int fd, const std::string& path) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0) return Status::OK();
  const int err = errno;
  ::close(fd);
  return ErrnoError("fcntl F_SETFL", path, err);
}

Status open_error(const std::string& path, int err) {
  if (err == ENOENT) return NotFound("cannot open '" + path + "': no such file or directory");
  if (err == EEXIST) return AlreadyExists("cannot create '" + path + "': it already exists");
  return ErrnoError("open", path, err);
}

class PosixEnv final : public Env {
 public:
  explicit PosixEnv(std::shared_ptr<UringQueue> uring) : uring_(std::move(uring)) {}

  Result<std::unique_ptr<File>> open(const std::string& path, OpenMode mode) override {
    int fd;
    do {
      fd = ::open(path.c_str(), open_flags(mode) | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return open_error(path, errno);
    if ((open_flags(mode) & O_NONBLOCK) != 0) MS_RETURN_IF_ERROR(clear_nonblocking(fd, path));
    uint64_t append_offset = 0;
    if (mode == OpenMode::kReadWrite) {
      struct stat st {};
      if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        return ErrnoError("stat", path, err);
      }
      append_offset = static_cast<uint64_t>(st.st_size);
    }
    return std::unique_ptr<File>(new PosixFile(path, fd, append_offset, uring_));
  }

  Status read_ranges(File& file, std::span<const ReadRange> ranges) override {
    auto* posix = dynamic_cast<PosixFile*>(&file);
    if (posix != nullptr && posix->uses_uring()) return posix->read_batch(ranges);
    return Env::read_ranges(file, ranges);
  }

  Status create_dir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) == 0) return Status::OK();
    int err = errno;
    if (err == EEXIST && is_directory(path)) return Status::OK();
    return ErrnoError("create directory", path, err);
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) == 0) return Status::OK();
    return ErrnoError("rename '" + from + "' to", to, errno);
  }

  Status remove_file(const std::string& path) override {
    if (::unlink(path.c_str()) == 0) return Status::OK();
    if (errno == ENOENT) return NotFound("cannot remove '" + path + "': no such file");
    return ErrnoError("remove", path, errno);
  }

  Status remove_dir(const std::string& path) override {
    if (::rmdir(path.c_str()) == 0) return Status::OK();
    return ErrnoError("remove directory", path, errno);
  }

  Result<std::vector<std::string>> list_dir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) {
      if (errno == ENOENT) return NotFound("cannot list '" + path + "': no such directory");
      return ErrnoError("list directory", path, errno);
    }
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(dir)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    ::closedir(dir);
    std::sort(names.begin(), names.end());
    return names;
  }

  bool exists(const std::string& path) override {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0;
  }

  bool is_directory(const std::string& path) override {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }

  bool is_symlink(const std::string& path) override {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
  }

  Status sync_dir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open directory", path, errno);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    // Some filesystems cannot fsync directories (EINVAL); their renames are durable already.
    if (rc != 0 && err != EINVAL) return ErrnoError("fsync directory", path, err);
    return Status::OK();
  }

  std::string_view backend_name() const override { return uring_ ? "io_uring" : "pread/pwrite"; }

 private:
  std::shared_ptr<UringQueue> uring_;
};

}  // namespace

Result<std::unique_ptr<Env>> new_posix_env(IoBackend backend) {
  if (backend == IoBackend::kPosix) return std::unique_ptr<Env>(new PosixEnv(nullptr));
  Result<std::unique_ptr<UringQueue>> uring = UringQueue::create(kUringDepth);
  if (uring.ok()) return std::unique_ptr<Env>(new PosixEnv(std::move(uring).value()));
  if (backend == IoBackend::kUring) {
    return uring.status().with_context("io_uring is unavailable on this machine");
  }
  MS_LOG(Debug) << "io_uring unavailable (" << uring.status().message()
                << "); reading and writing with pread/pwrite";
  return std::unique_ptr<Env>(new PosixEnv(nullptr));
}

Result<IoBackend> parse_io_backend(std::string_view text) {
  if (text.empty() || text == "auto") return IoBackend::kAuto;
  if (text == "posix") return IoBackend::kPosix;
  if (text == "uring") return IoBackend::kUring;
  return InvalidArgument("MS_IO_BACKEND='" + std::string(text) +
                         "' is not one of posix, uring, auto");
}

namespace {

IoBackend requested_backend() {
  const char* value = std::getenv("MS_IO_BACKEND");
  Result<IoBackend> parsed = parse_io_backend(value ? value : "");
  if (parsed.ok()) return *parsed;
  MS_LOG(Warn) << parsed.status().message() << "; detecting the backend instead";
  return IoBackend::kAuto;
}

}  // namespace

std::unique_ptr<Env> new_env_from_environment() {
  IoBackend backend = requested_backend();
  Result<std::unique_ptr<Env>> env = new_posix_env(backend);
  if (!env.ok()) {
    MS_LOG(Warn) << "MS_IO_BACKEND=uring: " << env.status().message() << "; using pread/pwrite";
    env = new_posix_env(IoBackend::kPosix);
  }
  MS_LOG(Debug) << "file I/O backend: " << (*env)->backend_name();
  return std::move(env).value();
}

Env& default_env() {
  static std::unique_ptr<Env> env = new_env_from_environment();
  return *env;
}

}  // namespace ms::io
