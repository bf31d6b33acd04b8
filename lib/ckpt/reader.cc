// Loading: validates what is asked (names, dtypes, shapes, regions inside their tensors) and
// hands the regions to the read pipeline (read_pipeline.h), which reads the shards overlapping
// them, verifies their crc32c, decompresses zstd shards and copies the overlaps into the
// caller's buffers. This is what makes load-time resharding work: the caller asks in global
// coordinates, whatever layout wrote the checkpoint.
#include <map>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/read_pipeline.h"
#include "ckpt/regions.h"
#include "core/checked_math.h"

namespace ms::ckpt {
namespace {

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
  ReadTarget target{t, Box{{offsets.begin(), offsets.end()}, {lengths.begin(), lengths.end()}}, {}};
  if (target.box.numel() == 0) return Status::OK();
  // The caller's buffer holds the region's elements (checked: the region lies in a tensor
  // whose byte count manifest validation bounded).
  target.dest = std::span(static_cast<std::byte*>(dest),
                          static_cast<size_t>(target.box.numel()) * dtype_size(t->dtype));
  return read_targets(step_dir, std::span(&target, 1), env);
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
    MS_RETURN_IF_ERROR(check_shard_in_file(step_dir + "/" + s.file, t, s, it->second));
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
  // Every region of every tensor goes to one pipeline, so the files are read once, in order,
  // whatever order the tensors come in.
  std::vector<ReadTarget> targets;
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
    for (LocalBox& box : spec_boxes(want.spec)) {
      const size_t bytes = static_cast<size_t>(box.box.numel()) * element;
      std::byte* dest = static_cast<std::byte*>(want.dest) +
                        static_cast<size_t>(box.local_offset) * element;
      targets.push_back({t, std::move(box.box), std::span(dest, bytes)});
    }
  }
  ReadPipelineOptions read;
  read.direct_io = options.direct_io;
  return read_targets(step_dir, targets, env, read);
}

}  // namespace ms::ckpt
