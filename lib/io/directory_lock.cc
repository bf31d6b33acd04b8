// flock rather than fcntl locks: an fcntl lock belongs to the process, so a second open of the
// file in the same process would "succeed" and closing either descriptor would drop the lock.
#include "io/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>
#include <utility>

#include "io/env.h"

namespace ms::io {
namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// The holder's line from an open lock file; empty when it has not written it yet.
std::string holder_of(int fd) {
  char text[256] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return "";
  std::string_view line(text, static_cast<size_t>(n));
  return std::string(line.substr(0, line.find('\n')));
}

Status write_holder(int fd, const std::string& path) {
  const std::string line = "pid " + std::to_string(::getpid()) + " on host " + host_name() + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    return ErrnoError("cannot write the lock holder into", path, errno);
  }
  return Status::OK();
}

}  // namespace

Result<DirectoryLock> DirectoryLock::acquire(const std::string& dir, const std::string& name) {
  MS_RETURN_IF_ERROR(default_env().create_dirs(dir));
  std::string path = dir + "/" + name;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return ErrnoError("cannot open the lock file", path, errno);
  DirectoryLock lock(fd, std::move(path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return ErrnoError("cannot lock", lock.path_, errno);
    const std::string holder = holder_of(fd);
    return FailedPrecondition(
        lock.path_ + " is held by " +
        (holder.empty() ? "a process that has not named itself yet" : holder));
  }
  MS_RETURN_IF_ERROR(write_holder(fd, lock.path_));
  return lock;
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace ms::io
