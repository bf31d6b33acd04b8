// A test Env that fails chosen operations on one path only (tests/ckpt), where
// io::FaultInjectingEnv fails every rename or directory fsync and so would stop a save or a
// command at its first file rather than at its commit.
#pragma once

#include <cerrno>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/env.h"

namespace ms::ckpt {

// Fails renames onto `rename_target` always, and the `sync_call`-th fsync (1-based) of
// `sync_dir_path`; sync_calls() counts the fsyncs of `sync_dir_path` so far.
class PathFaultEnv final : public io::Env {
 public:
  explicit PathFaultEnv(io::Env& base) : base_(base) {}

  std::string rename_target;
  std::string sync_dir_path;
  int sync_call = 0;

  Result<std::unique_ptr<io::File>> open(const std::string& path, io::OpenMode mode) override {
    return base_.open(path, mode);
  }
  Status read_ranges(io::File& file, std::span<const io::ReadRange> ranges) override {
    return base_.read_ranges(file, ranges);
  }
  Status create_dir(const std::string& path) override { return base_.create_dir(path); }
  Status rename(const std::string& from, const std::string& to) override {
    if (to == rename_target) return ErrnoError("injected: rename '" + from + "' to", to, EIO);
    return base_.rename(from, to);
  }
  Status remove_file(const std::string& path) override { return base_.remove_file(path); }
  Status remove_dir(const std::string& path) override { return base_.remove_dir(path); }
  Result<std::vector<std::string>> list_dir(const std::string& path) override {
    return base_.list_dir(path);
  }
  bool exists(const std::string& path) override { return base_.exists(path); }
  bool is_directory(const std::string& path) override { return base_.is_directory(path); }
  Status sync_dir(const std::string& path) override {
    if (path == sync_dir_path && ++sync_calls_ == sync_call) {
      return ErrnoError("injected: fsync directory", path, EIO);
    }
    return base_.sync_dir(path);
  }
  std::string_view backend_name() const override { return base_.backend_name(); }
  int sync_calls() const { return sync_calls_; }

 private:
  io::Env& base_;
  int sync_calls_ = 0;
};

}  // namespace ms::ckpt
