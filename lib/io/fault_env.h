// An Env wrapper that injects I/O faults, after leveldb's ErrorEnv, so tests can show that
// writers survive a failing disk: an error on the Nth write, a torn (short) write, a full disk
// after K bytes, failing fsync or rename (any, or of one path), and a flipped byte on read. Faults apply to every
// file opened through this Env and are counted from the moment they are set; everything not
// faulted passes through to the wrapped Env unchanged. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "io/env.h"

namespace ms::io {

class FaultInjectingEnv final : public Env {
 public:
  // `base` does the real work and must outlive this Env and every file opened through it.
  explicit FaultInjectingEnv(Env& base);
  ~FaultInjectingEnv() override;

  // The nth write (1 = the next one) fails with EIO and writes nothing.
  void fail_nth_write(int n);
  // The nth positional read (File::read_at, 1 = the next one) fails with EIO and reads nothing.
  void fail_nth_read(int n);
  // The nth write stores only its first `kept_bytes` bytes, then fails with EIO: a torn write.
  void short_write_nth(int n, size_t kept_bytes);
  // After `bytes` more bytes have been written, writes fail with ENOSPC; the write that crosses
  // the limit stores the part that fits first, as a filling disk does.
  void enospc_after(uint64_t bytes);
  // File::sync (fsync) fails with EIO.
  void fail_file_sync(bool fail);
  // sync_dir fails with EIO.
  void fail_dir_sync(bool fail);
  // rename fails with EIO and renames nothing.
  void fail_rename(bool fail);
  // Renames onto `path` fail with EIO and rename nothing; other renames pass. Reaches a commit's
  // own rename without stopping the writes before it.
  void fail_rename_onto(const std::string& path);
  // The nth fsync of directory `path` from now on (1 = the next) fails with EIO; other fsyncs
  // pass. Reaches the fsync that follows a rename into `path`.
  void fail_nth_dir_sync_of(const std::string& path, int n);
  // Reads of `path` that cover `offset` return that byte XORed with `mask`; the file on disk is
  // untouched, as with a bad cable or cache. Several corruptions may be registered.
  void corrupt_on_read(const std::string& path, uint64_t offset, uint8_t mask = 0x01);
  // Removes every fault; counters keep counting.
  void clear_faults();

  int writes() const;              // write calls seen, failed ones included
  int reads() const;               // File::read_at calls seen, failed ones included
  uint64_t bytes_written() const;  // bytes that reached the wrapped Env
  int injected_faults() const;     // faults that fired
  int dir_syncs_of(const std::string& path) const;  // fsyncs of directory `path` seen

  Result<std::unique_ptr<File>> open(const std::string& path, OpenMode mode) override;
  Status read_ranges(File& file, std::span<const ReadRange> ranges) override;
  Status create_dir(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status remove_file(const std::string& path) override;
  Status remove_dir(const std::string& path) override;
  Result<std::vector<std::string>> list_dir(const std::string& path) override;
  bool exists(const std::string& path) override;
  bool is_directory(const std::string& path) override;
  bool is_symlink(const std::string& path) override;
  Status sync_dir(const std::string& path) override;
  std::string_view backend_name() const override;

  // Fault settings and counters, shared with the files opened through this Env.
  struct State;

 private:
  Env& base_;
  std::shared_ptr<State> state_;
};

}  // namespace ms::io
