// One owner per directory: an advisory lock (flock) on a file inside it, held for as long as
// the DirectoryLock lives. ms-train takes one on its run directory and `ms-diagnose supervise`
// another (under a different name), so a second job or supervisor on the same directory is
// refused instead of interleaving telemetry and overwriting checkpoints. The kernel drops the
// lock when the holder's last descriptor closes, whatever kills it, so a lock is never stale;
// the file itself stays behind (removing it would let two processes lock two different files).
// The holder writes "pid P on host H" into the file, which is how a refusal names it.
#pragma once

#include <string>

#include "core/status.h"

namespace ms::io {

class DirectoryLock {
 public:
  // Creates `dir` (and parents) when missing, opens or creates `dir`/`name` and locks it
  // without waiting. FailedPrecondition "<path> is held by pid P on host H" when another open
  // file (this process's or another's) holds the lock; IOError naming the path otherwise.
  static Result<DirectoryLock> acquire(const std::string& dir, const std::string& name);

  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  // Releases the lock.
  ~DirectoryLock();

  const std::string& path() const { return path_; }

 private:
  DirectoryLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd_ = -1;
  std::string path_;
};

}  // namespace ms::io
