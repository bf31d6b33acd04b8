// Offline resharding (see reshard_offline.h). Plan first (every process computes the same plan),
// then each process writes the data files of the target ranks r with r % size == rank, then the
// records travel to rank 0 as JSON and it commits like a save: manifest.json, tokenizer.json,
// rename of the temporary directory, `latest`. A failure at any of these steps (on any rank)
// removes what was written, so the output holds either the whole new checkpoint or nothing new.
#include "ckpt/reshard_offline.h"

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/commit.h"
#include "comm/agree.h"
#include "comm/variable_length.h"
#include "core/buffer.h"
#include "core/crc32c.h"
#include "core/version.h"
#include "io/atomic_file.h"
#include "io/output_path.h"

namespace ms::ckpt {
namespace {

using nlohmann::json;

// The data file of target rank r holds what r saves; this process writes r % size == rank.
struct OutputFile {
  std::unique_ptr<io::File> file;
  uint64_t size = 0;
};

// `scratch` is reused from shard to shard (grown when a shard needs more): freshly allocated
// memory costs a page fault per 4 KiB on first touch, as much as the read on some VMs.
Result<json> write_shard(const std::string& step_dir, const Manifest& m, const PlannedShard& s,
                         const std::string& tmp, std::map<int, OutputFile>& files, Buffer& scratch,
                         io::Env& env) {
  const TensorRecord& t = m.tensors[s.tensor];
  const size_t size = static_cast<size_t>(s.box.numel()) * dtype_size(t.dtype);
  if (scratch.size() < size) {
    scratch = Buffer();
    Result<Buffer> grown = Buffer::allocate(size);
    if (!grown.ok()) {
      return grown.status().with_context("tensor \"" + t.name + "\" box " + box_string(s.box));
    }
    scratch = std::move(*grown);
  }
  MS_RETURN_IF_ERROR(read_region(step_dir, m, t.name, s.box.offsets, s.box.lengths,
                                 scratch.data(), env));
  const std::string_view bytes(static_cast<const char*>(scratch.data()), size);
  OutputFile& out = files[s.target_rank];
  const std::string name = data_file_name(s.target_rank);
  if (!out.file) {
    MS_ASSIGN_OR_RETURN(out.file, env.open(tmp + "/" + name, io::OpenMode::kTruncate));
  }
  MS_RETURN_IF_ERROR(out.file->write_at(out.size, bytes));
  json record = {{"tensor", t.name}, {"file", name}, {"offset", out.size},
                 {"length", bytes.size()}, {"global_offsets", s.box.offsets},
                 {"lengths", s.box.lengths}, {"crc32c", crc32c(bytes.data(), bytes.size())}};
  out.size += bytes.size();
  return record;
}

// This process's share of the plan, written and synced; returns its shard records.
Result<json> write_my_files(const std::string& step_dir, const Manifest& m,
                            const std::vector<PlannedShard>& plan, const std::string& tmp,
                            const ReshardOptions& options, int rank, int size, io::Env& env) {
  uint64_t total = 0, done = 0;
  for (const PlannedShard& s : plan) {
    if (s.target_rank % size != rank) continue;
    total += static_cast<uint64_t>(s.box.numel()) * dtype_size(m.tensors[s.tensor].dtype);
  }
  std::map<int, OutputFile> files;
  Buffer scratch;
  json records = json::array();
  for (const PlannedShard& s : plan) {
    if (s.target_rank % size != rank) continue;
    MS_ASSIGN_OR_RETURN(json record, write_shard(step_dir, m, s, tmp, files, scratch, env));
    done += record["length"].get<uint64_t>();
    records.push_back(std::move(record));
    if (options.progress) options.progress(done, total);
  }
  for (auto& [r, f] : files) {
    MS_RETURN_IF_ERROR(f.file->sync());
    MS_RETURN_IF_ERROR(f.file->close());
  }
  return records;
}

Manifest resharded_manifest(const Manifest& source, const ReshardTarget& target,
                            const std::vector<std::string>& texts) {
  Manifest m = source;
  m.layout = Layout{target.world(), target.dp, target.tp, target.pp, target.ep, target.zero};
  m.toolkit_version = std::string(version());
  m.git_revision = git_revision();
  std::map<std::string, TensorRecord*> by_name;
  for (TensorRecord& t : m.tensors) {
    t.shards.clear();
    by_name[t.name] = &t;
  }
  for (const std::string& text : texts) {
    for (const json& r : json::parse(text)) {
      by_name[r["tensor"].get<std::string>()]->shards.push_back(
          ShardRecord{r["file"], r["offset"], r["length"], r["global_offsets"], r["lengths"],
                      "raw", r["crc32c"]});
    }
  }
  return m;
}

Status commit_output(const std::string& step_dir, const Manifest& m, io::StagedDirectory& out,
                     const ReshardOptions& options, io::Env& env) {
  MS_RETURN_IF_ERROR(m.validate(out.final_path() + "/manifest.json"));
  MS_RETURN_IF_ERROR(
      io::write_file_atomic(env, out.path() + "/manifest.json", m.to_json().dump(1) + "\n"));
  if (env.exists(step_dir + "/tokenizer.json")) {
    MS_ASSIGN_OR_RETURN(
        std::string tokenizer,
        io::read_file(env, step_dir + "/tokenizer.json", io::kMaxTokenizerFileBytes, "tokenizer"));
    MS_RETURN_IF_ERROR(io::write_file_atomic(env, out.path() + "/tokenizer.json", tokenizer));
  }
  MS_RETURN_IF_ERROR(out.commit());
  return publish_latest(env, options.output_dir, step_dir_name(m.step), out.final_path());
}

// Rank 0 checks the output against the source and creates the staged step directory; every
// rank learns the temporary directory's name or rank 0's error.
Result<std::string> shared_staging(const std::string& step_dir, const std::string& final_dir,
                                   const ReshardOptions& options, comm::Communicator& comm,
                                   io::Env& env, std::unique_ptr<io::StagedDirectory>& staged) {
  Status made;
  std::string name;
  if (comm.rank() == 0) {
    const io::OutputRules rules{{step_dir}, "--output", options.replace};
    made = io::check_output_is_not_an_input(options.output_dir, rules);
    Result<std::unique_ptr<io::StagedDirectory>> created =
        made.ok() ? io::StagedDirectory::create(env, final_dir, rules)
                  : Result<std::unique_ptr<io::StagedDirectory>>(made);
    made = created.status();
    if (created.ok()) {
      staged = std::move(*created);
      name = staged->path();
    }
  }
  MS_RETURN_IF_ERROR(comm::agree(comm, made, "creating the output step directory"));
  MS_RETURN_IF_ERROR(comm::broadcast_variable(comm, name, 0));
  return name;
}

// Reads the source manifest and checks every shard lies in its data file, so the plan (whose
// size follows the tensors' shapes) is bounded by what is really on disk.
Result<Manifest> read_source(const std::string& step_dir, io::Env& env) {
  MS_ASSIGN_OR_RETURN(Manifest source, Manifest::read(step_dir, env));
  for (const TensorRecord& t : source.tensors) {
    MS_RETURN_IF_ERROR(check_tensor_files(step_dir, t, env));
  }
  return source;
}

}  // namespace

Result<std::string> reshard_checkpoint(const std::string& step_dir, const ReshardOptions& options,
                                       comm::Communicator& comm, io::Env& env) {
  // Every rank reads the source; they agree before anything is created, so a damaged source
  // fails everywhere with the reading rank's error and leaves no temporary directory.
  Result<Manifest> read = read_source(step_dir, env);
  MS_RETURN_IF_ERROR(comm::agree(comm, read.status(), "reading the checkpoint to reshard"));
  const Manifest source = std::move(*read);
  // Every rank computes the same plan, so a refused tensor fails all of them alike, before the
  // temporary directory exists.
  Result<std::vector<PlannedShard>> planned =
      plan_reshard(source, options.target, options.tp_placement, options.pp_placement,
                   options.ep_placement, options.max_shard_bytes);
  // A manifest that contradicts itself is named as the file it is.
  if (planned.status().code() == StatusCode::kCorruption) {
    return planned.status().with_context(step_dir + "/manifest.json");
  }
  MS_ASSIGN_OR_RETURN(const std::vector<PlannedShard> plan, std::move(planned));
  const std::string final_dir = options.output_dir + "/" + step_dir_name(source.step);
  std::unique_ptr<io::StagedDirectory> staged;  // rank 0's; removes the temporary on failure
  MS_ASSIGN_OR_RETURN(std::string tmp,
                      shared_staging(step_dir, final_dir, options, comm, env, staged));
  Result<json> mine = write_my_files(step_dir, source, plan, tmp, options, comm.rank(),
                                     comm.size(), env);
  const Status written = comm::agree(comm, mine.status(), "writing the resharded shards");
  Status st = written;
  Result<std::vector<std::string>> texts =
      st.ok() ? comm::all_gather_variable(comm, mine->dump()) : Result<std::vector<std::string>>(st);
  if (texts.ok() && comm.rank() == 0) {
    st = commit_output(step_dir, resharded_manifest(source, options.target, *texts), *staged,
                       options, env);
  } else if (!texts.ok()) {
    st = texts.status();
  }
  if (!written.ok()) return written;  // already agreed
  MS_RETURN_IF_ERROR(comm::agree(comm, st, "committing the resharded checkpoint"));
  return final_dir;
}

}  // namespace ms::ckpt
