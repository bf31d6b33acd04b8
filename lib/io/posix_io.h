// The pread/pwrite loops behind the fallback backend. POSIX lets both calls transfer fewer bytes
// than asked and fail with EINTR; these loops turn that into "all bytes or an error" (writes) and
// "short only at end of file" (reads). The system calls are passed in so tests can script short
// transfers and interruptions without a misbehaving filesystem.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace ms::io {

struct SysIo {
  ssize_t (*pread)(int fd, void* buf, size_t count, off_t offset);
  ssize_t (*pwrite)(int fd, const void* buf, size_t count, off_t offset);
};

// The real ::pread / ::pwrite.
const SysIo& real_sys_io();

// Reads until `dest` is full or end of file; returns the byte count. IOError naming `path`
// for any error other than EINTR (which is retried).
Result<size_t> pread_full(const SysIo& sys, int fd, const std::string& path, uint64_t offset,
                          std::span<std::byte> dest);

// Writes all of `data` at `offset`, retrying after EINTR and short writes. IOError naming `path`
// on failure (ENOSPC included); a prefix may already be on disk then.
Status pwrite_full(const SysIo& sys, int fd, const std::string& path, uint64_t offset,
                   std::span<const std::byte> data);

}  // namespace ms::io
