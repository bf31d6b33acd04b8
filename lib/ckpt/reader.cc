// Loading: reads the byte ranges of the shards overlapping a requested region (one batched
// read_ranges per data file), verifies their crc32c, decompresses zstd shards, and copies the
// overlap into the caller's buffer. This is what makes load-time resharding work: the caller
// asks in global coordinates, whatever layout wrote the checkpoint.
#include <algorithm>
#include <cstring>
#include <map>

#include "ckpt/checkpoint.h"
#include "ckpt/regions.h"
#include "core/buffer.h"
#include "core/checked_math.h"
#include "core/crc32c.h"
#include "io/zstd_stream.h"

namespace ms::ckpt {
namespace {

// Reads at most this many stored bytes per batch, bounding the memory a load needs.
constexpr uint64_t kBatchBytes = 256ull << 20;

Box shard_box(const ShardRecord& s) { return {s.global_offsets, s.lengths}; }

std::string describe(const std::string& path, const TensorRecord& t, const ShardRecord& s) {
  return path + ": tensor \"" + t.name + "\" shard at byte offset " + std::to_string(s.offset) +
         " (" + std::to_string(s.length) + " bytes)";
}

// The shard's stored bytes checked and, for zstd, decompressed into a buffer of exactly the
// box's raw size (a frame claiming or yielding another size is Corruption).
Result<Buffer> decode_shard(const std::string& path, const TensorRecord& t, const ShardRecord& s,
                            Buffer stored) {
  const uint32_t crc = crc32c(stored.data(), stored.size());
  if (crc != s.crc32c) {
    return Corruption(describe(path, t, s) + ": crc32c mismatch (manifest " +
                      std::to_string(s.crc32c) + ", data " + std::to_string(crc) +
                      "); the file is damaged: restore it or load an older checkpoint");
  }
  if (s.codec == "raw") return stored;
  const uint64_t want = static_cast<uint64_t>(shard_box(s).numel()) * dtype_size(t.dtype);
  Result<Buffer> raw = Buffer::allocate(want);
  if (!raw.ok()) return raw.status().with_context(describe(path, t, s));
  const Status decoded = io::decompress_exact(
      std::string_view(static_cast<const char*>(stored.data()), stored.size()), raw->bytes());
  if (!decoded.ok()) return Corruption(describe(path, t, s) + ": " + decoded.message());
  return raw;
}

struct Overlap {
  const ShardRecord* shard = nullptr;
  Box region;
};

// Refuses a shard whose byte range passes the end of its file before anything is allocated
// for it (checked again here for manifests built in memory without validate()).
Status check_in_file(const std::string& path, const TensorRecord& t, const ShardRecord& s,
                     uint64_t file_size) {
  const Result<uint64_t> end = checked_end(s.offset, s.length, "byte range");
  if (end.ok() && *end <= file_size) return Status::OK();
  return Corruption(describe(path, t, s) + ": the file has only " + std::to_string(file_size) +
                    " bytes (truncated?)");
}

// Reads one batch of shards of one file and copies their overlap with `target` into `dest`.
Status read_batch(const std::string& path, const TensorRecord& t, std::span<const Overlap> batch,
                  const Box& target, std::span<std::byte> dest, io::Env& env) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file, env.open(path, io::OpenMode::kRead));
  MS_ASSIGN_OR_RETURN(const uint64_t file_size, file->size());
  std::vector<Buffer> stored;
  std::vector<io::ReadRange> ranges;
  for (const Overlap& o : batch) {
    MS_RETURN_IF_ERROR(check_in_file(path, t, *o.shard, file_size));
    Result<Buffer> buffer = Buffer::allocate(o.shard->length);
    if (!buffer.ok()) return buffer.status().with_context(describe(path, t, *o.shard));
    stored.push_back(std::move(*buffer));
    ranges.push_back({o.shard->offset, stored.back().bytes()});
  }
  Status read = env.read_ranges(*file, ranges);
  if (!read.ok()) {
    return read.with_context("tensor \"" + t.name + "\" (file " + path + " is shorter than " +
                             "the manifest says: truncated?)");
  }
  const size_t element = dtype_size(t.dtype);
  for (size_t i = 0; i < batch.size(); ++i) {
    MS_ASSIGN_OR_RETURN(Buffer raw, decode_shard(path, t, *batch[i].shard, std::move(stored[i])));
    const Status copied = copy_region(batch[i].region, shard_box(*batch[i].shard), raw.bytes(),
                                      target, dest, element);
    if (!copied.ok()) return copied.with_context(describe(path, t, *batch[i].shard));
  }
  return Status::OK();
}

Status check_region(const TensorRecord& t, std::span<const int64_t> offsets,
                    std::span<const int64_t> lengths) {
  bool ok = offsets.size() == t.global_shape.size() && lengths.size() == t.global_shape.size();
  for (size_t d = 0; ok && d < offsets.size(); ++d) {
    const Result<int64_t> end = checked_add(offsets[d], lengths[d], "region end");
    ok = end.ok() && *end <= t.global_shape[d];
  }
  if (ok) return Status::OK();
  return InvalidArgument("region outside tensor \"" + t.name + "\" of shape " +
                         nlohmann::json(t.global_shape).dump());
}

}  // namespace

Status read_region(const std::string& step_dir, const Manifest& m, std::string_view name,
                   std::span<const int64_t> offsets, std::span<const int64_t> lengths,
                   void* dest, io::Env& env) {
  const TensorRecord* t = m.find(name);
  if (t == nullptr) return NotFound("checkpoint " + step_dir + " has no tensor \"" + std::string(name) + "\"");
  MS_RETURN_IF_ERROR(check_region(*t, offsets, lengths));
  const Box target{{offsets.begin(), offsets.end()}, {lengths.begin(), lengths.end()}};
  if (target.numel() == 0) return Status::OK();
  // The caller's buffer holds the region's elements (checked: the region lies in a tensor
  // whose byte count manifest validation bounded).
  const std::span<std::byte> out(static_cast<std::byte*>(dest),
                                 static_cast<size_t>(target.numel()) * dtype_size(t->dtype));
  // Manifest::validate proved the shards tile the tensor, so their overlaps with the region
  // tile the region: every element of `dest` is written exactly once. The count below only
  // guards manifests built in memory without validate().
  std::map<std::string, std::vector<Overlap>> by_file;
  int64_t covered = 0;
  for (const ShardRecord& s : t->shards) {
    std::optional<Box> region = intersect_boxes(target, shard_box(s));
    if (!region) continue;
    covered += region->numel();
    by_file[s.file].push_back({&s, std::move(*region)});
  }
  if (covered != target.numel()) {
    return Corruption(step_dir + "/manifest.json: tensor \"" + t->name +
                      "\": the shards do not tile the requested region " + box_string(target));
  }
  for (auto& [file, overlaps] : by_file) {
    std::sort(overlaps.begin(), overlaps.end(),
              [](const Overlap& a, const Overlap& b) { return a.shard->offset < b.shard->offset; });
    size_t begin = 0;
    while (begin < overlaps.size()) {
      size_t end = begin;
      uint64_t bytes = 0;
      while (end < overlaps.size() && (end == begin || bytes + overlaps[end].shard->length <= kBatchBytes)) {
        bytes += overlaps[end++].shard->length;
      }
      MS_RETURN_IF_ERROR(read_batch(step_dir + "/" + file, *t,
                                    std::span(overlaps).subspan(begin, end - begin), target,
                                    out, env));
      begin = end;
    }
  }
  return Status::OK();
}

Status read_region(const std::string& step_dir, const Manifest& m, std::string_view name,
                   std::span<const int64_t> offsets, std::span<const int64_t> lengths,
                   void* dest) {
  return read_region(step_dir, m, name, offsets, lengths, dest, io::default_env());
}

Status check_tensor_files(const std::string& step_dir, const TensorRecord& t, io::Env& env) {
  std::map<std::string, uint64_t> sizes;
  for (const ShardRecord& s : t.shards) {
    auto it = sizes.find(s.file);
    if (it == sizes.end()) {
      const std::string path = step_dir + "/" + s.file;
      MS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file, env.open(path, io::OpenMode::kRead));
      MS_ASSIGN_OR_RETURN(const uint64_t size, file->size());
      it = sizes.emplace(s.file, size).first;
    }
    MS_RETURN_IF_ERROR(check_in_file(step_dir + "/" + s.file, t, s, it->second));
  }
  return Status::OK();
}

namespace {

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", \"" : "\"") + names[i] + "\"";
  if (names.size() > 5) out += " and " + std::to_string(names.size() - 5) + " more";
  return out;
}

}  // namespace

Status check_tensors(const Manifest& m, std::span<const ExpectedTensor> expected,
                     const LoadOptions& options) {
  std::vector<std::string> missing, unexpected;
  std::vector<std::string_view> wanted;
  for (const ExpectedTensor& e : expected) {
    wanted.push_back(e.name);
    const TensorRecord* t = m.find(e.name);
    if (t == nullptr) {
      missing.push_back(e.name);
    } else if (t->dtype != e.dtype || t->global_shape != e.global_shape) {
      return InvalidArgument("checkpoint tensor \"" + e.name + "\" is " +
                             std::string(dtype_name(t->dtype)) + " " +
                             nlohmann::json(t->global_shape).dump() + ", the model wants " +
                             std::string(dtype_name(e.dtype)) + " " +
                             nlohmann::json(e.global_shape).dump() +
                             ": the checkpoint belongs to a different model config");
    }
  }
  std::sort(wanted.begin(), wanted.end());
  for (const TensorRecord& t : m.tensors) {
    if (!std::binary_search(wanted.begin(), wanted.end(), std::string_view(t.name))) {
      unexpected.push_back(t.name);
    }
  }
  if (!missing.empty() && !options.allow_missing) {
    return InvalidArgument("the checkpoint lacks " + std::to_string(missing.size()) +
                           " tensor(s) the model needs: " + name_list(missing));
  }
  if (!unexpected.empty() && !options.allow_unexpected) {
    return InvalidArgument("the checkpoint holds " + std::to_string(unexpected.size()) +
                           " tensor(s) the model does not have: " + name_list(unexpected));
  }
  return Status::OK();
}

Status load_tensors(const std::string& step_dir, const Manifest& m,
                    std::span<const LoadTensor> tensors, const LoadOptions& options,
                    io::Env& env) {
  for (const LoadTensor& want : tensors) {
    const TensorRecord* t = m.find(want.name);
    if (t == nullptr) {
      if (options.allow_missing) continue;
      return NotFound("checkpoint " + step_dir + " has no tensor \"" + want.name + "\"");
    }
    if (t->dtype != want.dtype || t->global_shape != want.spec.global_shape()) {
      return InvalidArgument("checkpoint tensor \"" + want.name + "\" differs in dtype or shape "
                             "from the requested one");
    }
    const size_t element = dtype_size(t->dtype);
    for (const LocalBox& box : spec_boxes(want.spec)) {
      MS_RETURN_IF_ERROR(read_region(step_dir, m, want.name, box.box.offsets, box.box.lengths,
                                     static_cast<std::byte*>(want.dest) +
                                         static_cast<size_t>(box.local_offset) * element,
                                     env));
    }
  }
  return Status::OK();
}

}  // namespace ms::ckpt
