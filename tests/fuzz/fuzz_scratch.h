// A scratch directory for fuzz targets that must go through files (the readers open paths):
// made once per process under $TMPDIR, reused for every input, removed at exit.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "io/atomic_file.h"
#include "io/env.h"

namespace ms::fuzz {

// Owns the directory; the destructor removes it with std::filesystem, which (unlike the Env
// singleton) is not a static object that may already be gone at exit.
struct ScratchDir {
  ScratchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/ms_fuzz_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string path;
};

inline const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

// Replaces scratch_dir()/name with `bytes` (aborts on I/O failure: the harness is broken, not
// the input).
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  if (!io::write_file_atomic(path, bytes).ok()) std::abort();
  return path;
}

}  // namespace ms::fuzz
