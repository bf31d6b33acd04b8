// pread/pwrite loops; see posix_io.h.
#include "io/posix_io.h"

#include <unistd.h>

#include <cerrno>

namespace ms::io {

const SysIo& real_sys_io() {
  static const SysIo sys{&::pread, &::pwrite};
  return sys;
}

Result<size_t> pread_full(const SysIo& sys, int fd, const std::string& path, uint64_t offset,
                          std::span<std::byte> dest) {
  size_t done = 0;
  while (done < dest.size()) {
    ssize_t n =
        sys.pread(fd, dest.data() + done, dest.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read at offset " + std::to_string(offset + done) + " of", path, errno);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

Status pwrite_full(const SysIo& sys, int fd, const std::string& path, uint64_t offset,
                   std::span<const std::byte> data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n =
        sys.pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write at offset " + std::to_string(offset + done) + " of", path, errno);
    }
    if (n == 0) {
      return IOError("write at offset " + std::to_string(offset + done) + " of '" + path +
                     "' made no progress");
    }
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

}  // namespace ms::io
