// A fresh directory per test under GoogleTest's temp dir, removed with everything in it when the
// test ends, so io tests never see each other's files.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "io/env.h"

namespace ms::io::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "ms_io_XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    const char* made = ::mkdtemp(buffer.data());
    EXPECT_NE(made, nullptr) << "mkdtemp failed for " << pattern;
    path_ = made ? made : pattern;
  }
  ~TempDir() { (void)default_env().remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string backend_label(IoBackend backend) {
  return backend == IoBackend::kUring ? "uring" : "posix";
}

// The Env for a backend-parameterized test, or a skip with the reason io_uring cannot be used.
#define MS_IO_ENV_OR_SKIP(env_ptr, backend)                                            \
  do {                                                                                 \
    auto made_env_ = ::ms::io::new_posix_env(backend);                                 \
    if (!made_env_.ok()) {                                                             \
      GTEST_SKIP() << "io_uring is unavailable here, so only pread/pwrite is tested: " \
                   << made_env_.status().message();                                    \
    }                                                                                  \
    env_ptr = std::move(made_env_).value();                                            \
  } while (0)

}  // namespace ms::io::testing
