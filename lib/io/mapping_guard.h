// Memory-mapped input files that change under their reader. The dataset's .bin and the plan are
// read through mmap because the loader's hot path then costs a memcpy and no system call; the
// price is that a file truncated (or replaced in place) while mapped turns the next read of a
// lost page into SIGBUS, which would end the process with no file named. Reading with pread
// instead would make every read_tokens() fallible and a system call, for a fault that only a
// second writer causes. So mappings are registered here instead, and a SIGBUS whose address
// falls inside one prints "<program>: error: <file> was truncated or changed while mapped ..."
// and exits with status 1, as any other error of the toolkit does (under mpirun the launcher
// then ends the job). A SIGBUS elsewhere keeps its previous disposition.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ms::io {

// Registers [data, data + size) as a mapping of `path` (the first PATH_MAX bytes of it), and
// installs the SIGBUS handler on first use. Returns the registration to pass to
// unwatch_mapping, or -1 when the table of 1024 mappings is full (faults there stay SIGBUS).
// Thread-safe.
int watch_mapping(const void* data, size_t size, std::string_view path);

// Forgets registration `id` (-1 is ignored). Call before unmapping.
void unwatch_mapping(int id);

// A whole regular file mapped read-only and watched as above, for the readers that map their
// input (datasets, plans). The open is non-blocking and the file's type is checked, so a FIFO or
// a device in the file's place is refused naming it instead of blocking or being mapped. An
// empty file maps to nothing (data() is null). `what` names the file in errors ("plan").
class MappedFile {
 public:
  // NotFound "<what> '<path>' does not exist"; InvalidArgument for a file that is not regular.
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path, std::string_view what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  MappedFile() = default;

  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  int watch_ = -1;
};

}  // namespace ms::io
