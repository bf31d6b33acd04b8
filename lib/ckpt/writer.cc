// Saving: the snapshot into host staging memory, the data-file writer (inline or on a
// background thread) and the collective commit, around the plan of which rank writes which box
// (ckpt/write_plan.h). See checkpoint.h for the protocol; docs/checkpoint.md for the reasoning.
// Over 600 lines by choice: the three stages share one save's state (Checkpointer::Pending: the
// staging buffer, the copy buckets' states that before_overwrite waits on, the writer thread and
// its outcome), which no other file should see; apart they would need that state in a header.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/commit.h"
#include "ckpt/regions.h"
#include "ckpt/write_plan.h"
#include "ckpt/write_pacer.h"
#include "comm/variable_length.h"
#include "core/crc32c.h"
#include "core/logging.h"
#include "core/stream_copy.h"
#include "core/timer.h"
#include "core/version.h"
#include "io/atomic_file.h"
#include "io/bulk_writer.h"
#include "io/zstd_stream.h"

namespace ms::ckpt {
namespace {

// The background writer yields to training: a lower CPU priority (Linux nice values apply per
// thread) and the best-effort I/O class at its lowest level. Failure is harmless: the save
// just competes as before.
void lower_thread_priority() {
  const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 10);
#ifdef SYS_ioprio_set
  constexpr int kIoprioWhoProcess = 1, kIoprioClassBestEffort = 2, kIoprioClassShift = 13;
  (void)::syscall(SYS_ioprio_set, kIoprioWhoProcess, tid,
                  (kIoprioClassBestEffort << kIoprioClassShift) | 7);
#endif
}

using nlohmann::json;

std::string random_nonce() {
  std::random_device device;
  std::mt19937_64 gen((static_cast<uint64_t>(device()) << 32) ^ device() ^
                      static_cast<uint64_t>(wall_time_s() * 1e6));
  return std::to_string(gen() & 0xffffffffffffull);
}

// Where a bucket of the snapshot is: not copied yet, being copied by one thread, copied.
enum CopyState : uint8_t { kNotCopied = 0, kCopying = 1, kCopied = 2 };

// The snapshot is copied in buckets of at most this many bytes (the optimizer's default gradient
// bucket), so a caller that must change a tensor while the writer copies it waits for one bucket
// at most, and copies the rest of what it needs itself.
constexpr uint64_t kCopyBucketBytes = 4ull << 20;

// One bucket: the `bytes` bytes of a caller's tensor at `src`, staged at `staging_offset`, and,
// when the writer thread copied it, their CRC-32C taken during the copy (a shard's checksum is
// combined from its buckets', so staging is not read again). The caller's own copies skip the
// checksum, since it waits for them; the writer checksums those buckets from staging.
struct CopyBucket {
  const std::byte* src = nullptr;
  uint64_t bytes = 0;
  uint64_t staging_offset = 0;
  uint32_t crc = 0;
  bool has_crc = false;
};

}  // namespace

// One save between save() and its commit.
struct Checkpointer::Pending {
  SaveRequest request;
  std::string tmp_dir;
  std::string final_dir;
  std::vector<WriteItem> items;
  // Block-aligned, so the writer hands it to a direct file as it is (io/bulk_writer.h).
  Buffer staging;
  // The snapshot's buckets, in staging order, and a CopyState for each. The writer and the
  // caller (before_overwrite) both copy; whoever moves a bucket from kNotCopied to kCopying
  // copies it, the other waits for kCopied.
  std::vector<CopyBucket> buckets;
  std::unique_ptr<std::atomic<uint8_t>[]> copy_state;
  std::atomic<size_t> copied{0};  // buckets in kCopied
  // SaveRequest::source: the buckets are device memory, copied through it; the first failure.
  DeviceRuntime* source = nullptr;
  Stream source_stream;
  Status source_status;
  uint64_t caller_copied_bytes = 0;
  double caller_copy_s = 0;
  uint64_t staging_allocated_bytes = 0;
  double start_t = 0;
  double stall_s = 0;
  std::thread writer;
  std::atomic<bool> done{false};  // the data file is written (or failed); notified
  Status write_status;
  json records = json::array();  // the shard records this rank wrote, with tensor metadata
  // What the ranks exchange once the writes are done: the error message when they failed, else
  // `records` as JSON text. The writer serializes it, so the caller's thread does not.
  std::string outcome_text;
  uint64_t bytes_written = 0;
  // Rank 0, async: parsing the shard records, the manifest, rename and `latest` run on this
  // thread once every rank's writes are in (see Checkpointer::agree_writes). It reads only the
  // gathered records and `request`, never `items` or the staging buffer, which the next save
  // reuses meanwhile.
  std::thread publisher;
  std::atomic<bool> published{false};
  Status publish_status;
  double published_t = 0;  // wall time when publishing ended, set before `published`
  // One rank, async, nothing committing at save(): the writer thread publishes right after the
  // data file, and agree_writes() hands it over as the publisher. Unless `abandoned` (the
  // Checkpointer is going away) is set before it starts.
  bool publishes_itself = false;
  std::atomic<bool> abandoned{false};

  ~Pending() {
    if (writer.joinable()) writer.join();
    if (publisher.joinable()) publisher.join();
  }
  void prepare_staging(Buffer spare);
  bool copy_bucket(size_t i, bool checksum);
  void copy_all(bool checksum) {
    for (size_t i = 0; i < buckets.size(); ++i) copy_bucket(i, checksum);
  }
  // Where the writer reads `item`: staging, or the caller's tensor for a sync save.
  const std::byte* item_bytes(const WriteItem& item) const {
    if (staging.empty()) {
      return static_cast<const std::byte*>(item.data) +
             static_cast<size_t>(item.local_offset) * dtype_size(item.dtype);
    }
    return staging.bytes().data() + item.staging_offset;
  }
  // The CRC-32C of a staged item, from its buckets' (the snapshot must be complete).
  uint32_t staged_crc(const WriteItem& item) const {
    uint32_t crc = 0;
    for (size_t i = item.first_bucket, at = 0; at < item.bytes; ++i, at += kCopyBucketBytes) {
      const CopyBucket& b = buckets[i];
      crc = b.has_crc ? crc32c_combine(crc, b.crc, b.bytes)
                      : crc32c(staging.bytes().data() + b.staging_offset, b.bytes, crc);
    }
    return crc;
  }
  bool snapshot_complete() const {
    return copied.load(std::memory_order_acquire) == buckets.size();
  }
  void write_data_file(io::Env& env, int rank, bool background);
  Status append_staging_as_copied(io::BulkWriter& out, uint64_t run_bytes);
  // One rank: publishes this rank's records as the whole checkpoint (see publishes_itself).
  void publish_own_writes(io::Env& env);
};

namespace {

// Bytes of the staging buffer for `items`: all their bytes rounded up to whole blocks, so a
// direct writer can write the last one from it, and at least one block (an empty share still
// gets a buffer).
uint64_t staging_size(const std::vector<WriteItem>& items) {
  uint64_t total = 0;
  for (const WriteItem& item : items) total += item.bytes;
  const uint64_t block = io::kDirectIoAlignment;
  return std::max<uint64_t>((total + block - 1) / block * block, block);
}

}  // namespace

// Lays the boxes this rank writes out in one staging buffer, in file order. The previous save's
// buffer is reused when it is large enough: a fresh one is page-faulted in (and zeroed by the
// kernel) by its first copy, which costs more than the copy itself.
void Checkpointer::Pending::prepare_staging(Buffer spare) {
  uint64_t offset = 0;
  for (WriteItem& item : items) {
    item.staging_offset = offset;
    offset += item.bytes;
  }
  const uint64_t total = staging_size(items);
  if (spare.size() >= total) {
    staging = std::move(spare);
  } else {
    staging = Buffer(total, io::kDirectIoAlignment);
    staging_allocated_bytes = total;
  }
  for (WriteItem& item : items) {
    const auto* src = static_cast<const std::byte*>(item.data) +
                      static_cast<size_t>(item.local_offset) * dtype_size(item.dtype);
    item.first_bucket = buckets.size();
    for (uint64_t at = 0; at < item.bytes; at += kCopyBucketBytes) {
      buckets.push_back({src + at, std::min(kCopyBucketBytes, item.bytes - at),
                         item.staging_offset + at});
    }
  }
  copy_state.reset(new std::atomic<uint8_t>[std::max<size_t>(buckets.size(), 1)]);
  for (size_t i = 0; i < buckets.size(); ++i) copy_state[i].store(kNotCopied);
}

// Makes sure bucket i is in staging: copies it (checksumming it on the way when `checksum`) when
// no other thread has started to, else waits for that thread. True when this call made the copy.
bool Checkpointer::Pending::copy_bucket(size_t i, bool checksum) {
  std::atomic<uint8_t>& state = copy_state[i];
  uint8_t seen = kNotCopied;
  if (state.compare_exchange_strong(seen, kCopying, std::memory_order_acq_rel)) {
    CopyBucket& b = buckets[i];
    // Streaming stores: the disk reads staging by DMA, so caching it would only evict the
    // training's working set and cost a read of every line first. The checksum is taken on the
    // way, while each piece is in the cache.
    std::byte* dst = staging.bytes().data() + b.staging_offset;
    if (source != nullptr) {
      // Device memory: the runtime copies it down; the checksum is then taken on the host.
      Tensor to = Tensor::view_of(DType::kU8, {static_cast<int64_t>(b.bytes)}, dst);
      const Tensor from = Tensor::view_of(DType::kU8, {static_cast<int64_t>(b.bytes)},
                                          const_cast<std::byte*>(b.src), source->device());
      Status s = source->copy(to, from, source_stream);
      if (s.ok()) s = source->synchronize(source_stream);
      if (!s.ok() && source_status.ok()) source_status = std::move(s);
      if (checksum) {
        b.crc = crc32c(dst, b.bytes);
        b.has_crc = true;
      }
    } else if (checksum) {
      b.crc = copy_streaming_crc32c(dst, b.src, b.bytes);
      b.has_crc = true;
    } else {
      copy_streaming(dst, b.src, b.bytes);
    }
    state.store(kCopied, std::memory_order_release);
    state.notify_all();
    copied.fetch_add(1, std::memory_order_acq_rel);
    return true;
  }
  while (seen != kCopied) {
    state.wait(seen, std::memory_order_acquire);
    seen = state.load(std::memory_order_acquire);
  }
  return false;
}

// Hands staging to `out` as the snapshot fills it: the buckets in order, each once copied (here,
// with its checksum, or by the caller's before_overwrite), in runs of whole blocks of at least
// `run_bytes`. So the disk writes the start of the snapshot while the rest is being copied, and
// a direct writer still takes every run in place.
Status Checkpointer::Pending::append_staging_as_copied(io::BulkWriter& out, uint64_t run_bytes) {
  uint64_t end = 0;
  for (const WriteItem& item : items) end = std::max(end, item.staging_offset + item.bytes);
  const std::span<const std::byte> bytes = staging.bytes().first(end);
  uint64_t appended = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    copy_bucket(i, /*checksum=*/true);
    const uint64_t copied_to = buckets[i].staging_offset + buckets[i].bytes;
    const uint64_t ready = copied_to / io::kDirectIoAlignment * io::kDirectIoAlignment;
    if (ready >= appended + run_bytes) {
      MS_RETURN_IF_ERROR(out.append(bytes.subspan(appended, ready - appended)));
      appended = ready;
    }
  }
  return out.append(bytes.subspan(appended));
}

// Writes rank-XXXXX.data into the temporary directory (which every rank creates: mkdir of an
// existing directory succeeds) and records every shard. Runs on the background thread for async
// saves (`background`); touches nothing but this Pending and the Env. The boxes not yet in
// staging are copied first, at training's priority so the snapshot is soon complete; the
// writing then yields to training.
void Checkpointer::Pending::write_data_file(io::Env& env, int rank, bool background) {
  const std::string name = data_file_name(rank);
  auto run = [&]() -> Status {
    MS_RETURN_IF_ERROR(env.create_dirs(tmp_dir));
    if (items.empty()) return Status::OK();
    MS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file,
                        env.open(tmp_dir + "/" + name, io::OpenMode::kCreateNew));
    // Staging holds the raw data file byte for byte, so it goes to the file as the snapshot
    // fills it (aligned pieces straight from it when the writes are direct); its checksums
    // come from the snapshot's buckets, and anything else is checksummed while the writer
    // thread writes.
    const bool whole_staging = !staging.empty() && request.codec != "zstd";
    if (!whole_staging) copy_all(/*checksum=*/true);
    WritePacer pacer(request.max_write_mbps * 1e6, wall_time_s());
    // In pieces, so a paced writer sleeps between them instead of bursting.
    io::BulkWriter::Options options;
    options.piece_bytes = pacer.chunk_bytes();
    options.direct = request.direct_io;
    options.after_piece = [&pacer](uint64_t n) {
      const double wait = pacer.wait_after(n, wall_time_s());
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    };
    if (background) options.on_writer_start = lower_thread_priority;
    const uint64_t piece_bytes = options.piece_bytes;
    MS_ASSIGN_OR_RETURN(std::unique_ptr<io::BulkWriter> out,
                        io::BulkWriter::start(*file, std::move(options)));
    if (whole_staging) MS_RETURN_IF_ERROR(append_staging_as_copied(*out, piece_bytes));
    if (background) lower_thread_priority();
    for (const WriteItem& item : items) {
      std::string_view stored(reinterpret_cast<const char*>(item_bytes(item)), item.bytes);
      std::string compressed;
      if (request.codec == "zstd") {
        compressed = io::compress(stored);
        stored = compressed;
      }
      const uint64_t offset = whole_staging ? item.staging_offset : out->offset();
      if (request.codec == "zstd") {
        MS_RETURN_IF_ERROR(out->append_copy(stored));  // `compressed` goes with this iteration
      } else if (!whole_staging) {
        MS_RETURN_IF_ERROR(out->append(io::as_bytes(stored)));  // the tensor, until finish()
      }
      bytes_written += stored.size();
      records.push_back({{"name", item.name},
                         {"dtype", std::string(dtype_name(item.dtype))},
                         {"global_shape", item.global_shape},
                         {"file", name}, {"offset", offset}, {"length", stored.size()},
                         {"global_offsets", item.box.offsets}, {"lengths", item.box.lengths},
                         {"codec", request.codec},
                         {"crc32c", whole_staging ? staged_crc(item)
                                                  : crc32c(stored.data(), stored.size())}});
    }
    MS_RETURN_IF_ERROR(out->finish());
    MS_RETURN_IF_ERROR(file->sync());
    return file->close();
  };
  write_status = run();
  outcome_text = write_status.ok() ? records.dump() : write_status.message();
  done.store(true, std::memory_order_release);
  done.notify_all();
}

Checkpointer::Checkpointer(comm::Communicator& comm, io::Env& env) : comm_(comm), env_(env) {}
Checkpointer::Checkpointer(comm::Communicator& comm) : Checkpointer(comm, io::default_env()) {}
Checkpointer::~Checkpointer() {
  if (writing_) writing_->abandoned.store(true, std::memory_order_release);
}

bool Checkpointer::in_flight() const { return writing_ != nullptr || committing_ != nullptr; }

Status Checkpointer::save(std::span<const SaveTensor> tensors, SaveRequest request) {
  // An async save needs only the writing slot (and the staging buffer it frees); a sync save
  // commits inline, so every earlier save must be committed first to keep commits in order.
  MS_RETURN_IF_ERROR(make_room(!request.async));
  // A save that published itself is usually done by the next save (a step later): resolving it
  // here (no communication: one rank) lets this save publish itself too.
  if (committing_ && committing_->publishes_itself) MS_RETURN_IF_ERROR(resolve_commit(false));
  if (request.codec != "raw" && request.codec != "zstd") {
    return InvalidArgument("checkpoint codec \"" + request.codec + "\" is not raw or zstd");
  }
  Stopwatch watch;
  auto pending = std::make_unique<Pending>();
  pending->start_t = wall_time_s();
  int64_t nonce = comm_.rank() == 0 ? std::stoll(random_nonce()) : 0;
  MS_ASSIGN_OR_RETURN(pending->items,
                      plan_writes(tensors, request.max_shard_bytes, comm_, nonce));
  pending->tmp_dir = request.checkpoints_dir + "/.tmp-" + step_dir_name(request.step) + "-" +
                     std::to_string(nonce);
  pending->final_dir = request.checkpoints_dir + "/" + step_dir_name(request.step);
  const bool async = request.async;
  // A sync save writes straight from the tensors: the caller waits for the write anyway, so a
  // snapshot would only add a copy. The staging buffer is kept for the next async save. Device
  // memory is always staged, at once (SaveRequest::source).
  if (async || request.source != nullptr) {
    pending->source = request.source;
    pending->source_stream = request.source_stream;
    pending->prepare_staging(std::move(spare_staging_));
    if (!request.copy_on_write || request.source != nullptr) {
      pending->copy_all(/*checksum=*/false);
    }
    if (!pending->source_status.ok()) {
      return pending->source_status.with_context("checkpoint at step " +
                                                 std::to_string(request.step) +
                                                 ": copying the tensors from the device");
    }
  }
  pending->request = std::move(request);
  // make_room() above emptied the writing slot; with nothing committing either, no earlier
  // commit can come after this one's.
  pending->publishes_itself = async && comm_.size() == 1 && !committing_;
  writing_ = std::move(pending);
  if (async) {
    Pending* p = writing_.get();
    const int rank = comm_.rank();
    p->writer = std::thread([p, rank, &env = env_] {
      p->write_data_file(env, rank, true);
      if (p->publishes_itself && p->write_status.ok() &&
          !p->abandoned.load(std::memory_order_acquire)) {
        p->publish_own_writes(env);
      }
    });
    writing_->stall_s = watch.elapsed_s();
    return Status::OK();
  }
  writing_->write_data_file(env_, comm_.rank(), false);
  writing_->stall_s = watch.elapsed_s();
  MS_RETURN_IF_ERROR(agree_writes(true));
  MS_RETURN_IF_ERROR(resolve_commit(true));
  // This save's outcome is the newest; earlier ones stay queued for poll() and finish().
  Result<SaveReport> mine = std::move(outcomes_.back());
  outcomes_.pop_back();
  if (!mine.ok()) return mine.status();
  last_report_ = *mine;
  return Status::OK();
}

Status Checkpointer::reserve_staging(std::span<const SaveTensor> tensors,
                                     uint64_t max_shard_bytes) {
  int64_t nonce = 0;  // the plan is not saved, so its directory name does not matter
  MS_ASSIGN_OR_RETURN(const std::vector<WriteItem> items,
                      plan_writes(tensors, max_shard_bytes, comm_, nonce));
  const uint64_t total = staging_size(items);
  if (spare_staging_.size() >= total) return Status::OK();
  spare_staging_ = Buffer();  // the old one goes first, so the two are never held together
  MS_ASSIGN_OR_RETURN(spare_staging_, Buffer::allocate(total, io::kDirectIoAlignment));
  std::memset(spare_staging_.data(), 0, total);  // faults every page in now
  return Status::OK();
}

void Checkpointer::before_overwrite(const void* data, size_t bytes) {
  Pending* p = writing_.get();
  if (p == nullptr || p->snapshot_complete()) return;
  Stopwatch watch;
  const auto* begin = static_cast<const std::byte*>(data);
  const std::less<const std::byte*> before;  // a total order over pointers into any buffers
  // From the last bucket back, while the writer copies from the first: the two meet instead of
  // the caller waiting behind the writer for every bucket it reaches.
  for (size_t i = p->buckets.size(); i-- > 0;) {
    const CopyBucket& b = p->buckets[i];
    const bool overlaps = before(b.src, begin + bytes) && before(begin, b.src + b.bytes);
    if (overlaps && p->copy_bucket(i, /*checksum=*/false)) p->caller_copied_bytes += b.bytes;
  }
  const double s = watch.elapsed_s();
  p->caller_copy_s += s;
  p->stall_s += s;
}

void Checkpointer::before_overwrite_all() {
  Pending* p = writing_.get();
  if (p == nullptr || p->snapshot_complete()) return;
  Stopwatch watch;
  for (size_t i = p->buckets.size(); i-- > 0;) {  // backwards, as in before_overwrite
    if (p->copy_bucket(i, /*checksum=*/false)) p->caller_copied_bytes += p->buckets[i].bytes;
  }
  const double s = watch.elapsed_s();
  p->caller_copy_s += s;
  p->stall_s += s;
}

namespace {

// Every rank's write outcome, on every rank: the caller's thread only moves bytes, and only
// rank 0's publisher parses the records.
struct WriteOutcomes {
  std::vector<int64_t> failed;     // per rank: 1 when its writes failed
  std::vector<std::string> texts;  // per rank: its error message, or its shard records as JSON
};

Result<WriteOutcomes> gather_outcomes(comm::Communicator& comm, bool failed,
                                      const std::string& text) {
  // The failed flag rides as the first byte of the rank's text, so the whole exchange stays one
  // variable-length gather.
  MS_ASSIGN_OR_RETURN(std::vector<std::string> texts,
                      comm::all_gather_variable(comm, (failed ? "1" : "0") + text));
  WriteOutcomes out;
  for (std::string& t : texts) {
    if (t.empty()) return Internal("a rank's write outcome is empty");
    out.failed.push_back(t[0] == '1' ? 1 : 0);
    out.texts.push_back(t.substr(1));
  }
  return out;
}

// The manifest from every rank's shard records; Internal when ranks disagree on a tensor.
Result<Manifest> assemble_manifest(const WriteOutcomes& written, const SaveRequest& request) {
  Manifest m;
  m.step = request.step;
  m.toolkit_version = std::string(version());
  m.git_revision = std::string(git_revision());
  m.config_yaml = request.config_yaml;
  m.layout = request.layout;
  m.state = request.state;
  std::map<std::string, TensorRecord> tensors;
  for (const std::string& text : written.texts) {
    const json records = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!records.is_array()) return Internal("a rank's shard records are not a JSON array");
    for (const json& r : records) {
      TensorRecord& t = tensors[r.at("name").get<std::string>()];
      MS_ASSIGN_OR_RETURN(const DType dtype, parse_dtype(r.at("dtype").get<std::string>()));
      const auto shape = r.at("global_shape").get<std::vector<int64_t>>();
      if (!t.name.empty() && (t.dtype != dtype || t.global_shape != shape)) {
        return Internal("ranks disagree on the dtype or shape of tensor \"" + t.name + "\"");
      }
      t.name = r.at("name").get<std::string>();
      t.dtype = dtype;
      t.global_shape = shape;
      t.shards.push_back({r.at("file"), r.at("offset"), r.at("length"), r.at("global_offsets"),
                          r.at("lengths"), r.at("codec"), r.at("crc32c")});
    }
  }
  for (auto& [name, t] : tensors) {
    std::sort(t.shards.begin(), t.shards.end(), [](const ShardRecord& a, const ShardRecord& b) {
      return a.global_offsets < b.global_offsets;
    });
    m.tensors.push_back(std::move(t));
  }
  return m;
}

// Rank 0: manifest and tokenizer into the temporary directory, rename into place (moving an
// older directory of the same step aside first), `latest`, retention.
Status publish(io::Env& env, const Manifest& m, const SaveRequest& request,
               const std::string& tmp_dir, const std::string& final_dir) {
  MS_RETURN_IF_ERROR(m.validate(tmp_dir + "/manifest.json"));
  MS_RETURN_IF_ERROR(io::write_file_atomic(env, tmp_dir + "/manifest.json", m.to_json().dump(1)));
  if (!request.tokenizer_path.empty()) {
    MS_ASSIGN_OR_RETURN(
        const std::string tokenizer,
        io::read_file(env, request.tokenizer_path, io::kMaxTokenizerFileBytes, "tokenizer"));
    MS_RETURN_IF_ERROR(io::write_file_atomic(env, tmp_dir + "/tokenizer.json", tokenizer));
  }
  std::string replaced;
  if (env.exists(final_dir)) {
    replaced = request.checkpoints_dir + "/.old-" + step_dir_name(m.step) + "-" + random_nonce();
    MS_RETURN_IF_ERROR(env.rename(final_dir, replaced));
  }
  Status committed = io::commit_directory(env, tmp_dir, final_dir);
  if (committed.ok()) {
    committed = publish_latest(env, request.checkpoints_dir, step_dir_name(m.step), final_dir);
  }
  if (!committed.ok()) {
    // Nothing new is visible; the older save of this step goes back where it was.
    if (!replaced.empty() && !env.exists(final_dir)) (void)env.rename(replaced, final_dir);
    return committed;
  }
  if (!replaced.empty()) MS_RETURN_IF_ERROR(env.remove_all(replaced));
  if (request.keep > 0) {
    Result<PruneReport> pruned =
        prune_checkpoints(request.checkpoints_dir, request.keep, false, env);
    if (!pruned.ok()) MS_LOG(Warn) << "checkpoint retention: " << pruned.status().message();
    if (pruned.ok()) {
      for (const std::string& line : pruned->left_alone) {
        MS_LOG(Warn) << "checkpoint retention: " << line;
      }
    }
  }
  return Status::OK();
}

// The first failure any rank reported, or OK.
Status first_failure(const WriteOutcomes& written, int64_t step) {
  for (size_t r = 0; r < written.failed.size(); ++r) {
    if (written.failed[r] == 0) continue;
    return IOError("saving checkpoint step " + std::to_string(step) + " failed on rank " +
                   std::to_string(r) + ": " + written.texts[r] + "; nothing was committed");
  }
  return Status::OK();
}

void publish_and_mark(io::Env& env, const WriteOutcomes& written, Checkpointer::Pending& p) {
  Result<Manifest> m = assemble_manifest(written, p.request);
  p.publish_status = m.ok() ? publish(env, *m, p.request, p.tmp_dir, p.final_dir) : m.status();
  p.published_t = wall_time_s();
  p.published.store(true, std::memory_order_release);
}

}  // namespace

void Checkpointer::Pending::publish_own_writes(io::Env& env) {
  publish_and_mark(env, WriteOutcomes{{0}, {outcome_text}}, *this);
}

// Progress at a step boundary. The committing save is resolved first, so the writing one can
// take its place in the same call; an outcome either produces waits in outcomes_. A save that
// published itself (one rank) is resolved in the same call as its writes.
Result<std::optional<SaveReport>> Checkpointer::poll() {
  MS_RETURN_IF_ERROR(resolve_commit(false));
  if (writing_ && !committing_) {
    MS_RETURN_IF_ERROR(agree_writes(false));
    if (committing_ && committing_->publishes_itself) MS_RETURN_IF_ERROR(resolve_commit(false));
  }
  return next_outcome();
}

Result<std::optional<SaveReport>> Checkpointer::finish() {
  MS_RETURN_IF_ERROR(make_room(true));
  return next_outcome();
}

// Empties the writing slot (waiting for its writes) and, with `wait_for_all`, the committing
// slot too. A save still writing can only move on to committing once the save before it has
// committed, so that commit is waited for first; the outcomes wait in outcomes_.
Status Checkpointer::make_room(bool wait_for_all) {
  if (writing_) {
    MS_RETURN_IF_ERROR(resolve_commit(true));
    MS_RETURN_IF_ERROR(agree_writes(true));
  }
  if (wait_for_all) MS_RETURN_IF_ERROR(resolve_commit(true));
  return Status::OK();
}

Result<std::optional<SaveReport>> Checkpointer::next_outcome() {
  if (outcomes_.empty()) return std::optional<SaveReport>();
  Result<SaveReport> outcome = std::move(outcomes_.front());
  outcomes_.pop_front();
  if (!outcome.ok()) return outcome.status();
  return std::optional<SaveReport>(std::move(outcome).value());
}

// The first half of a commit (needs an empty committing slot): once every rank's writes of the
// writing save are in, gathers the shard records and has rank 0 publish them (on a thread for
// an async save); the save then commits. Nothing while some rank still writes (without `wait`).
// When any rank's writes failed, the temporary directory is removed and the error is the
// save's outcome. The staging buffer goes back to the spare slot here: the data files are
// written and closed, so the next save may fill it while this one commits.
Status Checkpointer::agree_writes(bool wait) {
  Stopwatch watch;
  int32_t done = wait || writing_->done.load(std::memory_order_acquire) ? 1 : 0;
  if (!wait && comm_.size() > 1) {
    MS_RETURN_IF_ERROR(comm_.allreduce(&done, &done, 1, DType::kI32, comm::ReduceOp::kMin));
  }
  if (done == 0) {
    writing_->stall_s += watch.elapsed_s();
    return Status::OK();
  }
  std::unique_ptr<Pending> p = std::move(writing_);
  // A writer that publishes itself goes on to publishing once its data file is written; it
  // touches the staging buffer no more from then on.
  p->done.wait(false, std::memory_order_acquire);
  if (p->writer.joinable() && !p->publishes_itself) p->writer.join();
  if (!p->staging.empty()) spare_staging_ = std::move(p->staging);
  MS_ASSIGN_OR_RETURN(WriteOutcomes written,
                      gather_outcomes(comm_, !p->write_status.ok(), p->outcome_text));
  const Status failed = first_failure(written, p->request.step);  // the same on every rank
  if (!failed.ok()) {
    if (comm_.rank() == 0) (void)env_.remove_all(p->tmp_dir);
    outcomes_.push_back(failed);
    return Status::OK();
  }
  if (p->publishes_itself) {
    p->publisher = std::move(p->writer);
  } else if (comm_.rank() == 0) {
    auto publish_all = [p = p.get(), &env = env_, written = std::move(written)] {
      publish_and_mark(env, written, *p);
    };
    if (p->request.async) {
      // At the writer's low priority: the commit has until the next save to finish, while the
      // step that starts now competes with it for the cores.
      p->publisher = std::thread([publish_all = std::move(publish_all)] {
        lower_thread_priority();
        publish_all();
      });
    } else {
      publish_all();
    }
  }
  p->stall_s += watch.elapsed_s();
  committing_ = std::move(p);
  return Status::OK();
}

// The second half: rank 0 says whether its publishing finished (with `wait`, once it has), and
// the committing save's report or error becomes its outcome on every rank.
Status Checkpointer::resolve_commit(bool wait) {
  if (!committing_) return Status::OK();
  Stopwatch watch;
  // [0]: 0 not yet, 1 committed, 2 failed; [1]: microseconds from save() to the commit.
  int64_t outcome[2] = {0, 0};
  if (comm_.rank() == 0) {
    if (wait && committing_->publisher.joinable()) committing_->publisher.join();
    if (committing_->published.load(std::memory_order_acquire)) {
      outcome[0] = committing_->publish_status.ok() ? 1 : 2;
      outcome[1] = std::llround(1e6 * (committing_->published_t - committing_->start_t));
    }
  }
  if (comm_.size() > 1) MS_RETURN_IF_ERROR(comm_.broadcast(outcome, 2, DType::kI64, 0));
  if (outcome[0] == 0) {
    committing_->stall_s += watch.elapsed_s();
    return Status::OK();
  }
  std::unique_ptr<Pending> p = std::move(committing_);
  if (p->publisher.joinable()) p->publisher.join();
  if (outcome[0] == 2) {
    if (comm_.rank() == 0) {
      (void)env_.remove_all(p->tmp_dir);
      outcomes_.push_back(p->publish_status);
    } else {
      outcomes_.push_back(IOError("committing checkpoint step " +
                                  std::to_string(p->request.step) +
                                  " failed on rank 0 (see its log); nothing was committed"));
    }
    return Status::OK();
  }
  SaveReport report;
  report.step = p->request.step;
  report.step_dir = p->final_dir;
  report.stall_s = p->stall_s + watch.elapsed_s();
  report.total_s = wall_time_s() - p->start_t;
  report.committed_s = 1e-6 * static_cast<double>(outcome[1]);
  report.bytes_written = p->bytes_written;
  report.caller_copied_bytes = p->caller_copied_bytes;
  report.caller_copy_s = p->caller_copy_s;
  report.staging_allocated_bytes = p->staging_allocated_bytes;
  if (comm_.rank() == 0) {
    char line[256];
    // The stall to a tenth of a millisecond: with a save every step it is a few of them.
    std::snprintf(line, sizeof(line), "checkpoint step %lld saved: %.1f MiB from this rank, "
                  "stall %.4fs, committed after %.3fs, total %.3fs",
                  static_cast<long long>(report.step),
                  static_cast<double>(report.bytes_written) / (1024.0 * 1024.0), report.stall_s,
                  report.committed_s, report.total_s);
    MS_LOG(Info) << line << " (" << report.step_dir << ")";
  }
  last_report_ = report;
  outcomes_.push_back(std::move(report));
  return Status::OK();
}

}  // namespace ms::ckpt
