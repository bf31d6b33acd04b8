// Helpers for the telemetry tests: a scratch directory and a crafted /proc tree, so host
// samples have known values.
#pragma once

#include <string>

#include "io/atomic_file.h"
#include "tests/io/temp_dir.h"

namespace ms::telemetry::testing {

using io::testing::TempDir;

inline void write_text(const std::string& path, const std::string& text) {
  ASSERT_TRUE(io::default_env().create_dirs(io::parent_dir(path)).ok());
  ASSERT_TRUE(io::write_file_atomic(path, text).ok()) << path;
}

inline std::string read_text(const std::string& path) {
  Result<std::string> text = io::read_file(path);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  return text.ok() ? *text : std::string();
}

// A /proc tree under `root` with 2 GB used of 8 GB, 1000 bytes sent and 500 received.
inline void write_fake_proc(const std::string& root) {
  write_text(root + "/stat", "cpu  100 0 100 800 0 0 0 0 0 0\n");
  write_text(root + "/meminfo",
             "MemTotal:        8000000 kB\nMemAvailable:    6000000 kB\n");
  write_text(root + "/net/dev",
             "Inter-| Receive | Transmit\n face |bytes packets|bytes packets\n"
             "  eth0: 500 1 0 0 0 0 0 0 1000 2 0 0 0 0 0 0\n");
  write_text(root + "/self/status", "VmRSS:\t 1000 kB\n");
  write_text(root + "/self/stat", "7 (fake) S 1 7 7 0 -1 0 0 0 0 0 10 5 0 0 20 0 1 0 5 0 0\n");
}

}  // namespace ms::telemetry::testing
