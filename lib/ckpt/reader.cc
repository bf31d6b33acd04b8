// Loading: reads the byte ranges of the shards overlapping a requested region (one batched
// read_ranges per data file), verifies their crc32c, decompresses zstd shards, and copies the
// overlap into the caller's buffer. This is what makes load-time resharding work: the caller
// asks in global coordinates, whatever layout wrote the checkpoint.
#include <algorithm>
#include <cstring>
#include <map>

#include "ckpt/checkpoint.h"
#include "ckpt/regions.h"
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

// The shard's stored bytes checked and, for zstd, decompressed to the box's raw bytes.
Result<std::string> decode_shard(const std::string& path, const TensorRecord& t,
                                 const ShardRecord& s, std::string stored) {
  const uint32_t crc = crc32c(stored.data(), stored.size());
  if (crc != s.crc32c) {
    return Corruption(describe(path, t, s) + ": crc32c mismatch (manifest " +
                      std::to_string(s.crc32c) + ", data " + std::to_string(crc) +
                      "); the file is damaged: restore it or load an older checkpoint");
  }
  if (s.codec == "raw") return stored;
  Result<std::string> raw = io::decompress(stored);
  if (!raw.ok()) return Corruption(describe(path, t, s) + ": " + raw.status().message());
  const uint64_t want = static_cast<uint64_t>(shard_box(s).numel()) * dtype_size(t.dtype);
  if (raw->size() != want) {
    return Corruption(describe(path, t, s) + ": decompresses to " + std::to_string(raw->size()) +
                      " bytes, the box needs " + std::to_string(want));
  }
  return raw;
}

struct Overlap {
  const ShardRecord* shard = nullptr;
  Box region;
};

// Reads one batch of shards of one file and copies their overlap with `target` into `dest`.
Status read_batch(const std::string& path, const TensorRecord& t, std::span<const Overlap> batch,
                  const Box& target, std::byte* dest, io::Env& env) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file, env.open(path, io::OpenMode::kRead));
  std::vector<std::string> stored(batch.size());
  std::vector<io::ReadRange> ranges;
  for (size_t i = 0; i < batch.size(); ++i) {
    stored[i].resize(batch[i].shard->length);
    ranges.push_back({batch[i].shard->offset,
                      {reinterpret_cast<std::byte*>(stored[i].data()), stored[i].size()}});
  }
  Status read = env.read_ranges(*file, ranges);
  if (!read.ok()) {
    return read.with_context("tensor \"" + t.name + "\" (file " + path + " is shorter than " +
                             "the manifest says: truncated?)");
  }
  const size_t element = dtype_size(t.dtype);
  for (size_t i = 0; i < batch.size(); ++i) {
    MS_ASSIGN_OR_RETURN(std::string raw, decode_shard(path, t, *batch[i].shard, std::move(stored[i])));
    copy_region(batch[i].region, shard_box(*batch[i].shard),
                reinterpret_cast<const std::byte*>(raw.data()), target, dest, element);
  }
  return Status::OK();
}

Status check_region(const TensorRecord& t, std::span<const int64_t> offsets,
                    std::span<const int64_t> lengths) {
  bool ok = offsets.size() == t.global_shape.size() && lengths.size() == t.global_shape.size();
  for (size_t d = 0; ok && d < offsets.size(); ++d) {
    ok = offsets[d] >= 0 && lengths[d] >= 0 && offsets[d] + lengths[d] <= t.global_shape[d];
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
                      "\": the shards do not cover the requested region (" +
                      std::to_string(covered) + " of " + std::to_string(target.numel()) +
                      " elements stored)");
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
                                    static_cast<std::byte*>(dest), env));
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
