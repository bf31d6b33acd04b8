// Atomic replacement of files and directories, so a crash mid-save never leaves a loadable half.
// Files are written to a temporary name in the target's directory, fsynced, renamed over the
// target, and the directory is fsynced so the rename itself is durable. Rename within one
// directory is the only atomicity assumed, which holds on local and shared POSIX filesystems.
// Everything here takes an Env so tests can inject faults; the overloads without one use
// default_env().
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "io/env.h"

namespace ms::io {

// Replaces `path` with `contents` atomically: temp file in the same directory, write all, fsync,
// rename over `path`, fsync the directory. On any failure the temp file is removed, `path` keeps
// its previous content (or stays absent), and an IOError naming `path` is returned.
Status write_file_atomic(Env& env, const std::string& path, std::string_view contents);
Status write_file_atomic(const std::string& path, std::string_view contents);

// Caps of whole-file reads, by kind of file. Every whole-file read has one, so no input makes
// a reader take unbounded memory or time: a device (/dev/zero), FIFO or directory is refused by
// its kind before any byte is read, and an oversized file by its size.
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
// YAML configs (run, mixture, cluster) and JSON metadata (config.json, meta.json, quantization
// metadata, check and inflight reports, `latest`): hand-written or tool-written, kilobytes.
inline constexpr uint64_t kMaxConfigFileBytes = 16 * kMiB;
// tokenizer.json: the largest vocabularies in use (Gemma's 256k) come to a few tens of MiB.
inline constexpr uint64_t kMaxTokenizerFileBytes = 256 * kMiB;
// manifest.json lists every shard of every tensor: a large model at a wide layout reaches tens
// of MiB.
inline constexpr uint64_t kMaxManifestFileBytes = 512 * kMiB;
// Text read whole into memory (telemetry and trace files, prompts, evaluation text, model
// files of the diagnosis models): bounded so that the text and its parse stay within a few GB.
inline constexpr uint64_t kMaxTextFileBytes = 512 * kMiB;

// Reads the whole of `path`, which must be a regular file of at most `max_bytes`. The open never
// blocks (a FIFO without a writer included). NotFound when `path` does not exist; InvalidArgument
// naming `what` ("config file", "cluster file"), the path and what it is when it is a FIFO, a
// device, a directory or a socket; InvalidArgument naming `what`, the path, its size and the cap
// when it is larger (or grows larger while read); IOError naming the path on other failures.
Result<std::string> read_file(Env& env, const std::string& path, uint64_t max_bytes,
                              std::string_view what);
Result<std::string> read_file(const std::string& path, uint64_t max_bytes, std::string_view what);
// The same with the cap of a text file (kMaxTextFileBytes), called "file" in messages.
Result<std::string> read_file(Env& env, const std::string& path);
Result<std::string> read_file(const std::string& path);

// InvalidArgument naming `what` (e.g. "--output out.plan") when `path` exists and is not a
// regular file or a link to one. An atomic write renames its temporary over `path`, which would
// replace a device, a FIFO or a socket: `--output /dev/null --replace` run as root turned
// /dev/null into a plan. AtomicFileWriter::create refuses such a target; tools check it up
// front (check_output_file) so a long run does not fail only when it writes.
Status check_replaceable_file(const std::string& path, std::string_view what);

// Streams a file into place atomically. Writes go to `<path>.tmp.<pid>.<random>`; commit()
// fsyncs it, renames it over `path` and fsyncs the directory. Destroying the writer without a
// successful commit() removes the temporary file, so an abandoned save leaves nothing behind.
// After any failed call the writer is poisoned: later writes and commit() return that error.
class AtomicFileWriter {
 public:
  // Creates the temporary file; IOError naming `path` when it cannot. `env` must outlive the
  // writer.
  static Result<std::unique_ptr<AtomicFileWriter>> create(Env& env, const std::string& path);
  static Result<std::unique_ptr<AtomicFileWriter>> create(const std::string& path);
  ~AtomicFileWriter();

  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends `data` to the temporary file.
  Status append(std::string_view data);
  // The temporary file, for writers (such as ZstdWriter, or a BulkWriter, which may switch it to
  // direct I/O) that write to a File directly. A write
  // that fails through it poisons this writer too, so commit() never publishes a partial file.
  File& file() { return *recorder_; }
  // fsync + rename over the target + fsync of the directory. Afterwards the writer is done.
  Status commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  AtomicFileWriter(Env& env, std::string path, std::string temp_path, std::unique_ptr<File> file);
  Status fail(Status status);
  void discard();

  Env& env_;
  std::string path_;
  std::string temp_path_;
  std::unique_ptr<File> file_;      // the temporary file; null once closed or discarded
  std::unique_ptr<File> recorder_;  // what file() hands out: forwards to file_, records failures
  Status direct_write_error_;       // first failure seen through recorder_
  Status error_;
  bool committed_ = false;
};

// Publishes a fully written directory atomically: fsyncs every regular file directly inside
// `tmp_dir`, fsyncs `tmp_dir`, renames it to `final_dir` (which must not exist or be an empty
// directory) and fsyncs the parent of `final_dir`. Both must lie in the same parent directory
// for the guarantee to hold on shared filesystems. On failure `final_dir` is not created (a
// rename whose parent fsync failed is moved back) and `tmp_dir` is left for the caller to
// remove or retry.
Status commit_directory(Env& env, const std::string& tmp_dir, const std::string& final_dir);
Status commit_directory(const std::string& tmp_dir, const std::string& final_dir);

// Name for a sibling of `path` that no other process picks: `<path>.<tag>.<pid>.<random hex>`.
std::string sibling_name(const std::string& path, std::string_view tag);
// Name for a temporary sibling of `path`: `<path>.tmp.<pid>.<random hex>`.
std::string temp_sibling_name(const std::string& path);

}  // namespace ms::io
