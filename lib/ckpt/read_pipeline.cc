// The chunked, read-ahead shard reader behind load_tensors and read_region (read_pipeline.h).
#include "ckpt/read_pipeline.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "core/buffer.h"
#include "core/checked_math.h"
#include "core/crc32c.h"
#include "io/zstd_stream.h"

namespace ms::ckpt {
namespace {

Box shard_box(const ShardRecord& s) { return {s.global_offsets, s.lengths}; }

// A shard to read, and the targets it overlaps.
struct ShardTask {
  const TensorRecord* tensor = nullptr;
  const ShardRecord* shard = nullptr;
  std::string path;
  std::vector<const ReadTarget*> targets;
};

// A piece of a shard's stored bytes, [begin, end). For a raw shard it is whole rows
// [row_begin, row_end) of the outermost dimension (all of a 0-d shard), so the piece is itself
// the row-major buffer of a box; a compressed shard is one piece.
struct Chunk {
  size_t task = 0;
  uint64_t begin = 0, end = 0;
  int64_t row_begin = 0, row_end = 0;
  bool last = false;
};

uint64_t align_down(uint64_t v) { return v / io::kDirectIoAlignment * io::kDirectIoAlignment; }
uint64_t align_up(uint64_t v) { return align_down(v + io::kDirectIoAlignment - 1); }

// The overlapping shards of every target, each once, in file and offset order.
Result<std::vector<ShardTask>> plan_tasks(const std::string& step_dir,
                                          std::span<const ReadTarget> targets) {
  std::map<std::tuple<std::string, uint64_t, const ShardRecord*>, ShardTask> by_place;
  for (const ReadTarget& target : targets) {
    const TensorRecord& t = *target.tensor;
    const int64_t want = target.box.numel();
    int64_t covered = 0;
    for (const ShardRecord& s : t.shards) {
      const std::optional<Box> region = intersect_boxes(target.box, shard_box(s));
      if (!region) continue;
      covered += region->numel();
      ShardTask& task = by_place[{s.file, s.offset, &s}];
      if (task.shard == nullptr) {
        task.tensor = &t;
        task.shard = &s;
        task.path = step_dir + "/" + s.file;
      }
      task.targets.push_back(&target);
    }
    // Manifest::validate proved the shards tile the tensor, so their overlaps tile the region:
    // every element of the destination is written exactly once. This only guards manifests
    // built in memory without validate().
    if (covered != want) {
      return Corruption(step_dir + "/manifest.json: tensor \"" + t.name +
                        "\": the shards do not tile the requested region " +
                        box_string(target.box));
    }
  }
  std::vector<ShardTask> tasks;
  tasks.reserve(by_place.size());
  for (auto& [place, task] : by_place) tasks.push_back(std::move(task));
  return tasks;
}

// Cuts every task into chunks of about `chunk_bytes`.
std::vector<Chunk> plan_chunks(std::span<const ShardTask> tasks, uint64_t chunk_bytes) {
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const ShardRecord& s = *tasks[i].shard;
    const bool rows = s.codec == "raw" && !s.lengths.empty() && s.lengths[0] > 0;
    if (!rows) {
      chunks.push_back({i, 0, s.length, 0, s.lengths.empty() ? 1 : s.lengths[0], true});
      continue;
    }
    const int64_t n = s.lengths[0];
    // A raw shard's stored bytes are its box's; a record that says otherwise is caught by
    // copy_region against the box (the rows then split the stored bytes evenly or not at all).
    const uint64_t row_bytes = std::max<uint64_t>(1, s.length / static_cast<uint64_t>(n));
    const int64_t per_chunk =
        std::max<int64_t>(1, static_cast<int64_t>(chunk_bytes / row_bytes));
    for (int64_t r = 0; r < n; r += per_chunk) {
      const int64_t r_end = std::min(n, r + per_chunk);
      const bool last = r_end == n;
      chunks.push_back({i, static_cast<uint64_t>(r) * row_bytes,
                        last ? s.length : static_cast<uint64_t>(r_end) * row_bytes, r, r_end,
                        last});
    }
  }
  return chunks;
}

// One buffer of the ring: the reader fills it with chunk `chunk`, the caller empties it.
struct Slot {
  Buffer buffer;
  std::span<const std::byte> data;  // the chunk's bytes inside buffer
  Status status;                    // the reader's error for this chunk
  bool full = false;
};

class Pipeline {
 public:
  Pipeline(std::span<const ShardTask> tasks, std::span<const Chunk> chunks, io::Env& env,
           const ReadPipelineOptions& options)
      : tasks_(tasks), chunks_(chunks), env_(env), options_(options),
        slots_(static_cast<size_t>(std::max(1, options.buffers))) {}
  ~Pipeline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    changed_.notify_all();
    if (reader_.joinable()) reader_.join();
  }

  Status run() {
    reader_ = std::thread([this] { read_all(); });
    std::vector<uint32_t> crcs(tasks_.size(), 0);
    for (size_t i = 0; i < chunks_.size(); ++i) {
      Slot& slot = slots_[i % slots_.size()];
      {
        std::unique_lock<std::mutex> lock(mu_);
        changed_.wait(lock, [&] { return slot.full; });
      }
      MS_RETURN_IF_ERROR(slot.status);
      MS_RETURN_IF_ERROR(consume(chunks_[i], slot.data, crcs[chunks_[i].task]));
      {
        std::lock_guard<std::mutex> lock(mu_);
        slot.full = false;
      }
      changed_.notify_all();
    }
    return Status::OK();
  }

 private:
  // The reader thread: every chunk in order into the ring, stopping at the first error (which
  // goes to the caller in that chunk's slot).
  void read_all() {
    std::unique_ptr<io::File> file;
    std::string open_path;
    uint64_t file_size = 0;
    bool direct = false;
    for (size_t i = 0; i < chunks_.size(); ++i) {
      Slot& slot = slots_[i % slots_.size()];
      {
        std::unique_lock<std::mutex> lock(mu_);
        changed_.wait(lock, [&] { return stop_ || !slot.full; });
        if (stop_) return;
      }
      const Chunk& chunk = chunks_[i];
      const ShardTask& task = tasks_[chunk.task];
      Status status = Status::OK();
      if (open_path != task.path) {
        status = open(task.path, file, file_size, direct);
        open_path = status.ok() ? task.path : std::string();
      }
      if (status.ok()) status = read_chunk(*file, file_size, direct, chunk, slot);
      {
        std::lock_guard<std::mutex> lock(mu_);
        slot.status = status;
        slot.full = true;
      }
      changed_.notify_all();
      if (!status.ok()) return;
    }
  }

  Status open(const std::string& path, std::unique_ptr<io::File>& file, uint64_t& size,
              bool& direct) {
    file.reset();
    MS_ASSIGN_OR_RETURN(file, env_.open(path, io::OpenMode::kRead));
    MS_ASSIGN_OR_RETURN(size, file->size());
    direct = false;
    // The descriptor's O_DIRECT applies to reads as well (io::File::enable_direct_writes).
    if (options_.direct_io) {
      MS_ASSIGN_OR_RETURN(direct, file->enable_direct_writes());
    }
    return Status::OK();
  }

  Status read_chunk(io::File& file, uint64_t file_size, bool direct, const Chunk& chunk,
                    Slot& slot) {
    const ShardTask& task = tasks_[chunk.task];
    const ShardRecord& s = *task.shard;
    // Refuses a shard whose byte range passes the end of its file before reading any of it.
    MS_RETURN_IF_ERROR(check_shard_in_file(task.path, *task.tensor, s, file_size));
    const uint64_t from = s.offset + chunk.begin, to = s.offset + chunk.end;
    // A direct read covers whole blocks; the chunk is the part of them it asked for.
    const uint64_t first = direct ? align_down(from) : from;
    const uint64_t last = direct ? align_up(to) : to;
    if (slot.buffer.size() < last - first) {
      slot.buffer = Buffer();
      // Huge pages: a direct read pins its destination's pages, 8 a chunk instead of 4096.
      Result<Buffer> grown = Buffer::allocate(last - first, io::kDirectIoAlignment, Pages::kHuge);
      if (!grown.ok()) return grown.status().with_context(describe_shard(task.path, *task.tensor, s));
      slot.buffer = std::move(*grown);
    }
    const std::span<std::byte> into = slot.buffer.bytes().first(last - first);
    Result<size_t> got = file.read_at(first, into);
    if (!got.ok()) {
      return got.status().with_context("tensor \"" + task.tensor->name + "\"");
    }
    // Short only at the end of the file, which may come inside the last block.
    if (*got < to - first) {
      return Corruption(describe_shard(task.path, *task.tensor, s) + ": the file ends at byte " +
                        std::to_string(first + *got) + " (truncated?)");
    }
    slot.data = into.subspan(from - first, to - from);
    return Status::OK();
  }

  // The caller's thread: the chunk's bytes into the running checksum, then into every target
  // it overlaps (a raw chunk at once; a compressed shard after its checksum and decoding).
  Status consume(const Chunk& chunk, std::span<const std::byte> data, uint32_t& crc) {
    const ShardTask& task = tasks_[chunk.task];
    const ShardRecord& s = *task.shard;
    const TensorRecord& t = *task.tensor;
    crc = crc32c(data.data(), data.size(), crc);
    if (chunk.last && crc != s.crc32c) {
      return Corruption(describe_shard(task.path, t, s) + ": crc32c mismatch (manifest " +
                        std::to_string(s.crc32c) + ", data " + std::to_string(crc) +
                        "); the file is damaged: restore it or load an older checkpoint");
    }
    const size_t element = dtype_size(t.dtype);
    Box box = shard_box(s);
    Buffer decoded;
    std::span<const std::byte> raw = data;
    if (s.codec != "raw") {
      const uint64_t want = static_cast<uint64_t>(box.numel()) * element;
      Result<Buffer> out = Buffer::allocate(want);
      if (!out.ok()) return out.status().with_context(describe_shard(task.path, t, s));
      decoded = std::move(*out);
      const Status st = io::decompress_exact(
          std::string_view(reinterpret_cast<const char*>(data.data()), data.size()),
          decoded.bytes());
      if (!st.ok()) return Corruption(describe_shard(task.path, t, s) + ": " + st.message());
      raw = decoded.bytes();
    } else if (!box.lengths.empty()) {
      box.offsets[0] += chunk.row_begin;
      box.lengths[0] = chunk.row_end - chunk.row_begin;
    }
    for (const ReadTarget* target : task.targets) {
      const std::optional<Box> region = intersect_boxes(target->box, box);
      if (!region) continue;
      const Status copied = copy_region(*region, box, raw, target->box, target->dest, element);
      if (!copied.ok()) return copied.with_context(describe_shard(task.path, t, s));
    }
    return Status::OK();
  }

  std::span<const ShardTask> tasks_;
  std::span<const Chunk> chunks_;
  io::Env& env_;
  const ReadPipelineOptions options_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable changed_;
  bool stop_ = false;
  std::thread reader_;
};

}  // namespace

std::string describe_shard(const std::string& path, const TensorRecord& t, const ShardRecord& s) {
  return path + ": tensor \"" + t.name + "\" shard at byte offset " + std::to_string(s.offset) +
         " (" + std::to_string(s.length) + " bytes)";
}

Status check_shard_in_file(const std::string& path, const TensorRecord& t, const ShardRecord& s,
                           uint64_t file_size) {
  const Result<uint64_t> end = checked_end(s.offset, s.length, "byte range");
  if (end.ok() && *end <= file_size) return Status::OK();
  return Corruption(describe_shard(path, t, s) + ": the file has only " +
                    std::to_string(file_size) + " bytes (truncated?)");
}

Status read_targets(const std::string& step_dir, std::span<const ReadTarget> targets,
                    io::Env& env, const ReadPipelineOptions& options) {
  MS_ASSIGN_OR_RETURN(const std::vector<ShardTask> tasks, plan_tasks(step_dir, targets));
  const std::vector<Chunk> chunks = plan_chunks(tasks, std::max<uint64_t>(1, options.chunk_bytes));
  if (chunks.empty()) return Status::OK();
  Pipeline pipeline(tasks, chunks, env, options);
  return pipeline.run();
}

}  // namespace ms::ckpt
