// Checkpoint verification (see verify.h): shard by shard, one read of each stored byte range.
#include "ckpt/verify.h"

#include <map>
#include <memory>

#include "ckpt/manifest.h"
#include "core/crc32c.h"

namespace ms::ckpt {
namespace {

struct OpenData {
  std::unique_ptr<io::File> file;
  uint64_t size = 0;
};

std::string where(const ShardRecord& s, const TensorRecord& t) {
  std::string offsets;
  for (int64_t o : s.global_offsets) offsets += (offsets.empty() ? "" : ",") + std::to_string(o);
  return s.file + " offset " + std::to_string(s.offset) + ": tensor '" + t.name +
         "' shard at [" + offsets + "]";
}

// The open data file `name`, or a problem recorded once when it cannot be opened.
OpenData* data_file(const std::string& step_dir, const std::string& name, io::Env& env,
                    std::map<std::string, OpenData>& files, VerifyReport& report) {
  auto it = files.find(name);
  if (it != files.end()) return it->second.file ? &it->second : nullptr;
  OpenData& d = files[name];
  Result<std::unique_ptr<io::File>> f = env.open(step_dir + "/" + name, io::OpenMode::kRead);
  Result<uint64_t> size = f.ok() ? (*f)->size() : Result<uint64_t>(f.status());
  if (!size.ok()) {
    report.problems.push_back(name + ": cannot be read: " + size.status().message());
    return nullptr;
  }
  d.file = std::move(*f);
  d.size = *size;
  return &d;
}

void verify_shard(const std::string& step_dir, const TensorRecord& t, const ShardRecord& s,
                  io::Env& env, std::map<std::string, OpenData>& files, VerifyReport& report) {
  OpenData* d = data_file(step_dir, s.file, env, files, report);
  if (d == nullptr) return;
  if (s.offset + s.length > d->size) {
    report.problems.push_back(where(s, t) + ": truncated (needs bytes up to " +
                              std::to_string(s.offset + s.length) + ", the file has " +
                              std::to_string(d->size) + ")");
    return;
  }
  std::string bytes(s.length, '\0');
  Result<size_t> got = d->file->read_at(
      s.offset, std::span<std::byte>(reinterpret_cast<std::byte*>(bytes.data()), bytes.size()));
  if (!got.ok() || *got != s.length) {
    const std::string why = got.ok() ? " (short read)" : ": " + got.status().message();
    report.problems.push_back(where(s, t) + ": read failed" + why);
    return;
  }
  const uint32_t crc = crc32c(bytes.data(), bytes.size());
  if (crc != s.crc32c) {
    char text[96];
    std::snprintf(text, sizeof(text), ": crc32c mismatch (manifest %08x, data %08x)", s.crc32c,
                  crc);
    report.problems.push_back(where(s, t) + text);
  }
}

}  // namespace

Result<VerifyReport> verify_checkpoint(
    const std::string& path, io::Env& env,
    const std::function<void(uint64_t done, uint64_t total)>& progress) {
  VerifyReport report;
  MS_ASSIGN_OR_RETURN(report.step_dir, resolve_checkpoint(path, env));
  MS_ASSIGN_OR_RETURN(Manifest m, Manifest::read(report.step_dir, env));
  uint64_t total = 0;
  for (const TensorRecord& t : m.tensors) {
    for (const ShardRecord& s : t.shards) total += s.length;
  }
  std::map<std::string, OpenData> files;
  for (const TensorRecord& t : m.tensors) {
    ++report.tensors;
    for (const ShardRecord& s : t.shards) {
      ++report.shards;
      verify_shard(report.step_dir, t, s, env, files, report);
      report.bytes += s.length;
      if (progress) progress(report.bytes, total);
    }
  }
  return report;
}

}  // namespace ms::ckpt
