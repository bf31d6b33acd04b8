// Saving and loading checkpoints in the manifest format (manifest.h), after ByteCheckpoint.
//
// Save: every rank hands the Checkpointer the tensors it holds, each as a ShardSpec of the global
// tensor plus a pointer to its local elements. A replicated tensor (every rank holds all of it:
// plain data parallelism) is written once, by a rank the planner picks so the bytes are spread
// evenly over the replicas; a ZeRO flat range is decomposed into regular boxes of the global
// tensor. A sync save writes straight from the tensors while the caller waits. An async save
// copies them into a host staging buffer: in save() itself, so training may change them as soon
// as it returns, or (copy_on_write) on the background writer right after save() returns, in
// 4 MiB buckets, the caller calling before_overwrite() before it changes a saved tensor so that
// any bucket not yet copied is copied first. Either way the save holds the values the tensors
// had at save(). A background thread (async) or the caller (sync) writes this rank's data file
// into the shared temporary directory
// checkpoints/.tmp-step-XXXXXXXX-<nonce>/. The agreement needs MPI, so it happens on the calling
// thread in poll()/finish(): the ranks agree that every write finished and gather the shard
// records; rank 0 then writes manifest.json, copies tokenizer.json, renames the directory into
// place (io::commit_directory), replaces checkpoints/latest and applies keep-last-N retention,
// on a background thread for an async save (so its fsyncs do not block training), and a later
// poll() tells every rank the outcome. A failed write on any rank fails the save on every rank,
// removes the temporary directory, and commits nothing. Two saves overlap at most: one writing
// (snapshot and data files) and the one before it committing, so a save at every step does not
// wait for the previous one's fsyncs; commits, and so `latest`, follow step order.
//
// Load: each rank asks for the boxes or flat ranges it needs; only the shards overlapping them
// are read (batched with io::Env::read_ranges), each verified against its crc32c, so any saved
// layout loads into any requested one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/manifest.h"
#include "comm/communicator.h"
#include "comm/shard_spec.h"
#include "core/buffer.h"
#include "core/device_runtime.h"
#include "core/status.h"
#include "io/env.h"

namespace ms::ckpt {

// ---- Loading ----

// Reads the global region [offsets, offsets + lengths) of tensor `name` (row-major) into `dest`
// (same dtype as stored, product(lengths) elements), reading only the shards that overlap it and
// verifying each shard's crc32c. NotFound for an unknown tensor, InvalidArgument for a region
// outside it, Corruption naming the file, tensor and offset for damaged data.
Status read_region(const std::string& step_dir, const Manifest& m, std::string_view name,
                   std::span<const int64_t> offsets, std::span<const int64_t> lengths,
                   void* dest, io::Env& env);
Status read_region(const std::string& step_dir, const Manifest& m, std::string_view name,
                   std::span<const int64_t> offsets, std::span<const int64_t> lengths,
                   void* dest);

// Checks that every shard of `t` lies inside its data file, by the files' real sizes, so the
// caller may allocate a buffer for the tensor: its size is then backed by bytes on disk (for a
// zstd shard, within the format's largest expansion, which Manifest::validate bounds). Call it
// before allocating from a manifest's shape. Corruption naming the file, the tensor and the
// shard; the I/O error naming the file when one cannot be opened.
Status check_tensor_files(const std::string& step_dir, const TensorRecord& t, io::Env& env);

// One tensor a rank wants: the slice `spec` (box or flat range) of `name`, into `dest`
// (spec.numel() elements of `dtype`, laid out as ShardSpec describes).
struct LoadTensor {
  std::string name;
  DType dtype = DType::kF32;
  comm::ShardSpec spec = comm::ShardSpec::replicated({});
  void* dest = nullptr;
};

struct LoadOptions {
  bool allow_missing = false;     // requested tensors absent from the checkpoint are skipped
  bool allow_unexpected = false;  // checkpoint tensors nobody asked for are ignored
  bool direct_io = true;          // data files are read past the page cache where it allows
};

// Compares the names a model expects with the checkpoint's. InvalidArgument listing (the first
// few) missing or unexpected tensors unless allowed; also refuses a dtype or shape mismatch.
struct ExpectedTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> global_shape;
};
Status check_tensors(const Manifest& m, std::span<const ExpectedTensor> expected,
                     const LoadOptions& options);

// Fills every LoadTensor (skipping missing ones when allowed). Errors as read_region.
Status load_tensors(const std::string& step_dir, const Manifest& m,
                    std::span<const LoadTensor> tensors, const LoadOptions& options,
                    io::Env& env);

// ---- Saving ----

// One tensor (or slice) this rank holds: `data` points at spec.numel() elements of `dtype`.
// A spec with is_replicated() marks a tensor every rank holds identically and lists in the same
// order, unless `exclusive` says only this rank holds it (a ZeRO range that happens to span a
// whole tensor); anything else is written by this rank and must not overlap other ranks' slices.
struct SaveTensor {
  std::string name;
  DType dtype = DType::kF32;
  comm::ShardSpec spec = comm::ShardSpec::replicated({});
  const void* data = nullptr;
  bool exclusive = false;
  bool replicated() const { return spec.is_replicated() && !exclusive; }
};

struct SaveRequest {
  std::string checkpoints_dir;  // e.g. <run.dir>/checkpoints; created when missing
  int64_t step = 0;
  Layout layout;
  std::string config_yaml;
  nlohmann::json state = nlohmann::json::object();
  std::string tokenizer_path;  // copied in as tokenizer.json when not empty
  bool async = true;
  int64_t keep = 0;               // keep the newest N complete checkpoints; 0 keeps all
  std::string codec = "raw";      // "raw" or "zstd"
  uint64_t max_shard_bytes = 64ull << 20;  // boxes are split along rows beyond this
  // Cap on this rank's data-file write rate in MB/s (10^6 bytes); 0: as fast as it goes. An
  // asynchronous writer also runs at a lower CPU and I/O priority than training.
  double max_write_mbps = 0;
  // Write the data files with direct I/O (bypassing the page cache) where the filesystem has
  // it; false writes through the page cache, starting each piece's writeback as it goes.
  bool direct_io = true;
  // Async saves only: save() copies nothing and returns at once; the writer copies each box
  // into staging before writing, and the caller must call Checkpointer::before_overwrite() (or
  // before_overwrite_all()) before changing any saved tensor while the save is in flight.
  bool copy_on_write = false;
  // Where the tensors' data lives: null for host memory; else the runtime of the device that
  // holds it (core/device_runtime.h), which the host never reads directly. Every box is then
  // copied into host staging through source->copy on `source_stream`, in save() on the calling
  // thread (async or not, copy_on_write ignored), so the work the caller issues after save()
  // cannot change what is saved.
  DeviceRuntime* source = nullptr;
  Stream source_stream;
};

// What a committed save cost; the same on every rank except bytes_written.
struct SaveReport {
  int64_t step = 0;
  std::string step_dir;
  // Time the caller was blocked: save() (snapshot, sync writes), every poll() and finish()
  // until the commit, the parts of later save() calls spent on this save (agreeing its writes,
  // waiting for its commit), and the copies before_overwrite() made.
  double stall_s = 0;
  // From save() until the caller learned of the commit: an async save's outcome is handed
  // back at a step boundary, so this includes the wait for that poll.
  double total_s = 0;
  // From save() until rank 0's commit finished (the checkpoint is loadable from then on), as
  // rank 0 measured it: every rank reports rank 0's figure, so on another rank it can exceed
  // total_s by however much later that rank called save().
  double committed_s = 0;
  uint64_t bytes_written = 0;  // by this rank
  // Copy-on-write saves: bytes of this rank's snapshot that before_overwrite() copied on the
  // caller's thread because the writer had not copied them yet, and the time that took.
  uint64_t caller_copied_bytes = 0;
  double caller_copy_s = 0;
  // Async saves: bytes of staging this save allocated on this rank (0 when the buffer of an
  // earlier save or of reserve_staging() served it).
  uint64_t staging_allocated_bytes = 0;
};

// Drives saves for one communicator. Every method is collective and must be called by the
// thread that initialized MPI, in the same order on every rank.
//
// Two async saves may be in flight: one writing (its snapshot and data files) and, before it,
// one committing (rank 0 publishing it on a background thread). A new save that finds the
// previous one still writing waits for those writes (normally done by then) and hands that save
// to the commit; only if the save before it is still committing is that commit waited for
// first. So commits run one at a time, in the order of the saves: `latest` only moves forward
// and retention sees the saves in order.
//
// On one rank there is nothing to agree, so an async save that starts with no save committing
// commits from its writer thread as soon as its data file is written, without waiting for a
// step boundary; poll() then only hands back its outcome.
//
// Outcomes: every async save ends in exactly one outcome, its report or its error (the same on
// every rank), and poll() and finish() hand them back one per call, oldest first, whichever
// call (save() included) resolved them.
class Checkpointer {
 public:
  // `comm` and `env` must outlive the Checkpointer.
  Checkpointer(comm::Communicator& comm, io::Env& env);
  explicit Checkpointer(comm::Communicator& comm);
  // Waits for the background threads of both saves in flight (rank 0's publishing runs to its
  // end, committing or undoing its save); a save whose publishing has not started is abandoned.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Plans and snapshots the save and starts writing (async) or writes and commits it (sync).
  // An async save first makes room as described above. A sync save first waits for every save
  // in flight (their outcomes wait for poll()), then returns its own error, or its report
  // through last_report(). Errors (planning, I/O on any rank) reach every rank and leave nothing
  // committed.
  Status save(std::span<const SaveTensor> tensors, SaveRequest request);
  // Call at step boundaries: resolves the committing save when rank 0 has published it, starts
  // committing the writing save once every rank has written it (and none is committing), then
  // returns the oldest outcome not handed back yet (an error for a failed save), or nullopt.
  // Does no communication when no save is in flight.
  Result<std::optional<SaveReport>> poll();
  // Waits for every save in flight to commit or fail, then returns as poll() does. Call it
  // again while has_outcome() to collect the later outcomes.
  Result<std::optional<SaveReport>> finish();

  // Copy-on-write saves (SaveRequest::copy_on_write): call before changing any of the bytes
  // [data, data + bytes) of a tensor handed to the in-flight save. Copies the boxes there the
  // writer has not copied yet into staging (waiting for one it is copying), so the save keeps
  // the values of its step. Not collective; cheap when the snapshot is complete or no save is
  // in flight. Call it from the thread that calls save().
  void before_overwrite(const void* data, size_t bytes);
  // The same for every tensor of the in-flight save.
  void before_overwrite_all();

  // For async saves, ahead of the first: plans a save of `tensors` as save() would, allocates
  // this rank's staging buffer for it and touches every page, so the run's first save waits on
  // no page faults (later saves reuse the buffer; a fresh one is faulted in by its first copy,
  // partly on the caller's thread). Collective, like save(); nothing when a kept buffer is
  // already large enough. A save of other tensors still works: it allocates if it must.
  Status reserve_staging(std::span<const SaveTensor> tensors, uint64_t max_shard_bytes);

  bool in_flight() const;  // a save is writing or committing
  bool has_outcome() const { return !outcomes_.empty(); }  // one waits for poll() or finish()
  const std::optional<SaveReport>& last_report() const { return last_report_; }

  struct Pending;

 private:
  Status make_room(bool wait_for_all);
  Status resolve_commit(bool wait);
  Status agree_writes(bool wait);
  Result<std::optional<SaveReport>> next_outcome();

  comm::Communicator& comm_;
  io::Env& env_;
  std::unique_ptr<Pending> writing_;     // snapshot and data files under way
  std::unique_ptr<Pending> committing_;  // written on every rank; rank 0 publishes it
  std::deque<Result<SaveReport>> outcomes_;  // resolved saves not handed back yet, oldest first
  std::optional<SaveReport> last_report_;
  // The last save's host staging buffer, kept for the next save (as pinned staging memory is
  // kept between saves): one copy of this rank's share of the state stays allocated.
  Buffer spare_staging_;  // block-aligned (see writer.cc)
};

// ---- Checkpoint directories ----

// Steps of the complete checkpoints (step-XXXXXXXX directories with a manifest.json) in
// `checkpoints_dir`, ascending. Temporary directories are not listed.
Result<std::vector<int64_t>> list_checkpoints(const std::string& checkpoints_dir, io::Env& env);

// What `checkpoint.resume: auto` resumes from.
struct AutoResumeChoice {
  std::string step_dir;  // the step directory to resume from; empty: start fresh
  std::string warning;   // what was wrong with `latest` when it was not followed; else empty
};

// The checkpoint `checkpoints_dir`/latest names when that is complete; otherwise (latest
// missing, unreadable, not a step name, naming a deleted or incomplete directory) the newest
// complete step directory, with a warning naming what was wrong; nothing (start fresh) when
// there is no complete checkpoint or no `checkpoints_dir`. A valid `latest` wins over a newer
// step directory, which may belong to an abandoned line of the run. Whether the chosen
// manifest parses is left to the loader, so damage is reported rather than skipped. Errors
// only when the directory exists but cannot be listed.
Result<AutoResumeChoice> newest_complete_checkpoint(const std::string& checkpoints_dir,
                                                    io::Env& env);

// Whether `name`, an entry of a checkpoints/ directory, is something an interrupted save,
// reshard or commit leaves behind: .tmp-step-* (a save's data), .old-step-* (a replaced step
// moved aside), step-*.tmp.* (an offline reshard's output), step-*.old.* (a step a reshard
// --replace moved aside) and latest.tmp.* (a `latest` being replaced). `ms-ckpt list` shows them, `ms-ckpt prune --temporaries` removes them.
bool is_temporary_name(std::string_view name);

// What prune_checkpoints did.
struct PruneReport {
  std::vector<std::string> removed;     // names removed: checkpoints oldest first, then temporaries
  std::vector<std::string> left_alone;  // one line each for what it would have removed but kept
};

// Removes all but the newest `keep` complete checkpoints (keep >= 1), never the one `latest`
// names (Corruption, removing nothing, when `latest` exists but names no step directory).
// A step directory that is a symbolic link is left alone and reported in `left_alone`: it
// points at data this directory does not own (another run's checkpoint, say). Nothing is
// deleted through a link (io::Env::remove_all). With `remove_temporaries`, also removes every
// is_temporary_name() entry that crashed or killed saves and reshards left (only safe when no
// save or reshard into this directory is running).
Result<PruneReport> prune_checkpoints(const std::string& checkpoints_dir, int64_t keep,
                                      bool remove_temporaries, io::Env& env);

}  // namespace ms::ckpt
