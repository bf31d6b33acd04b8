// Temp-file + fsync + rename + directory-fsync commits; see atomic_file.h for the guarantees.
#include "io/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <random>

#include "core/logging.h"

namespace ms::io {

namespace {

// A failure during an atomic write is an I/O failure of the target, whatever the inner cause
// (a missing directory included), and its message names the target.
Status write_failure(const std::string& path, const Status& cause) {
  return IOError("atomic write of '" + path + "' failed: " + cause.message());
}

uint64_t random_u64() {
  thread_local std::mt19937_64 gen{std::random_device{}() ^
                                   (static_cast<uint64_t>(::getpid()) << 32)};
  return gen();
}

// Makes a file's content durable: open, fsync, close.
Status sync_file(Env& env, const std::string& path) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<File> file, env.open(path, OpenMode::kRead));
  MS_RETURN_IF_ERROR(file->sync());
  return file->close();
}

// fsyncs every file below `dir`, then each directory after its contents.
Status sync_tree(Env& env, const std::string& dir) {
  MS_ASSIGN_OR_RETURN(std::vector<std::string> names, env.list_dir(dir));
  for (const std::string& name : names) {
    std::string child = dir + "/" + name;
    MS_RETURN_IF_ERROR(env.is_directory(child) ? sync_tree(env, child) : sync_file(env, child));
  }
  return env.sync_dir(dir);
}

// Forwards to the writer's temporary file and records the first failed write, so a failure in a
// direct writer (ZstdWriter on AtomicFileWriter::file()) keeps commit() from publishing.
class FailureRecordingFile final : public File {
 public:
  FailureRecordingFile(std::unique_ptr<File>& target, Status& first_error)
      : File(target->path(), 0), target_(target), first_error_(first_error) {}

 protected:
  Result<size_t> do_read_at(uint64_t offset, std::span<std::byte> dest) override {
    MS_RETURN_IF_ERROR(check_open());
    return target_->read_at(offset, dest);
  }
  Status do_write_at(uint64_t offset, std::span<const std::byte> data) override {
    MS_RETURN_IF_ERROR(check_open());
    return record(target_->write_at(offset, data));
  }
  Status do_sync() override {
    MS_RETURN_IF_ERROR(check_open());
    return record(target_->sync());
  }
  Status do_start_writeback(uint64_t offset, uint64_t bytes) override {
    MS_RETURN_IF_ERROR(check_open());
    return target_->start_writeback(offset, bytes);
  }
  Result<bool> do_enable_direct_writes() override {
    MS_RETURN_IF_ERROR(check_open());
    return target_->enable_direct_writes();
  }
  Status do_truncate(uint64_t size) override {
    MS_RETURN_IF_ERROR(check_open());
    return record(target_->truncate(size));
  }
  Result<uint64_t> do_size() override {
    MS_RETURN_IF_ERROR(check_open());
    return target_->size();
  }
  Status do_close() override {
    return FailedPrecondition("'" + path() +
                              "' is closed by AtomicFileWriter::commit(), not directly");
  }

 private:
  Status check_open() const {
    if (target_) return Status::OK();
    return FailedPrecondition("'" + path() + "' was already committed or discarded");
  }
  Status record(Status status) {
    if (!status.ok() && first_error_.ok()) first_error_ = status;
    return status;
  }

  std::unique_ptr<File>& target_;
  Status& first_error_;
};

}  // namespace

std::string sibling_name(const std::string& path, std::string_view tag) {
  char suffix[64];
  std::snprintf(suffix, sizeof(suffix), ".%d.%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(random_u64()));
  return path + "." + std::string(tag) + suffix;
}

std::string temp_sibling_name(const std::string& path) { return sibling_name(path, "tmp"); }

Status write_file_atomic(Env& env, const std::string& path, std::string_view contents) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> writer,
                      AtomicFileWriter::create(env, path));
  MS_RETURN_IF_ERROR(writer->append(contents));
  return writer->commit();
}

Status write_file_atomic(const std::string& path, std::string_view contents) {
  return write_file_atomic(default_env(), path, contents);
}

Result<std::string> read_file(Env& env, const std::string& path, uint64_t max_bytes,
                              std::string_view what) {
  const std::string named = std::string(what) + " '" + path + "'";
  MS_ASSIGN_OR_RETURN(std::unique_ptr<File> file, env.open(path, OpenMode::kRead));
  MS_ASSIGN_OR_RETURN(const FileKind kind, file->kind());
  if (kind != FileKind::kRegular) {
    return InvalidArgument(named + " is " + std::string(file_kind_name(kind)) +
                           ", not a regular file");
  }
  MS_ASSIGN_OR_RETURN(const uint64_t size, file->size());
  const std::string cap_text =
      std::to_string(max_bytes) + " bytes (" + std::to_string(max_bytes / kMiB) + " MiB)";
  if (size > max_bytes) {
    return InvalidArgument(named + " is " + std::to_string(size) + " bytes, above the limit of " +
                           cap_text + " for a " + std::string(what));
  }
  // One read of the size at open plus one byte, then more in small chunks until end of file in
  // case the file grew since; never past the cap. The capacity for the first read and the
  // final empty one is reserved up front: growing a string past its capacity doubles it, which
  // would copy the whole file and touch twice its pages to learn that nothing follows.
  constexpr size_t kGrowthChunk = size_t{64} << 10;
  std::string data;
  data.reserve(static_cast<size_t>(std::min<uint64_t>(size + 1 + kGrowthChunk, max_bytes + 1)));
  size_t chunk = static_cast<size_t>(size) + 1;
  for (;;) {
    const size_t old_size = data.size();
    if (old_size > max_bytes) {
      return InvalidArgument(named + " grew past the limit of " + cap_text + " while being read");
    }
    if (old_size > 0) chunk = kGrowthChunk;
    chunk = std::min<size_t>(chunk, max_bytes + 1 - old_size);
    data.resize(old_size + chunk);
    auto dest = std::as_writable_bytes(std::span<char>(data.data() + old_size, chunk));
    MS_ASSIGN_OR_RETURN(size_t got, file->read_at(old_size, dest));
    data.resize(old_size + got);
    if (got == 0) break;
  }
  MS_RETURN_IF_ERROR(file->close());
  return data;
}

Result<std::string> read_file(const std::string& path, uint64_t max_bytes, std::string_view what) {
  return read_file(default_env(), path, max_bytes, what);
}

Result<std::string> read_file(Env& env, const std::string& path) {
  return read_file(env, path, kMaxTextFileBytes, "file");
}

Result<std::string> read_file(const std::string& path) { return read_file(default_env(), path); }

AtomicFileWriter::AtomicFileWriter(Env& env, std::string path, std::string temp_path,
                                   std::unique_ptr<File> file)
    : env_(env),
      path_(std::move(path)),
      temp_path_(std::move(temp_path)),
      file_(std::move(file)),
      recorder_(new FailureRecordingFile(file_, direct_write_error_)) {}

Status check_replaceable_file(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return Status::OK();
  const std::string_view kind = file_kind_name(file_kind_of_mode(st.st_mode));
  return InvalidArgument(std::string(what) + " is " + std::string(kind) +
                         ", not a regular file; the output is renamed into place and would replace it, "
                         "so choose a file path");
}

Result<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::create(Env& env,
                                                                   const std::string& path) {
  if (!env.is_directory(path)) MS_RETURN_IF_ERROR(check_replaceable_file(path, "output '" + path + "'"));
  // A clash of two random 64-bit names is next to impossible; a few tries cover it anyway.
  Status last;
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::string temp_path = temp_sibling_name(path);
    Result<std::unique_ptr<File>> file = env.open(temp_path, OpenMode::kCreateNew);
    if (file.ok()) {
      return std::unique_ptr<AtomicFileWriter>(
          new AtomicFileWriter(env, path, std::move(temp_path), std::move(file).value()));
    }
    last = file.status();
    if (last.code() != StatusCode::kAlreadyExists) break;
  }
  return write_failure(path, last);
}

Result<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::create(const std::string& path) {
  return create(default_env(), path);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) discard();
}

Status AtomicFileWriter::append(std::string_view data) {
  if (!error_.ok()) return error_;
  if (!direct_write_error_.ok()) return fail(direct_write_error_);
  assert(!committed_ && "append after commit");
  // Through recorder_ so append() and file() share one append offset.
  Status status = recorder_->append(data);
  return status.ok() ? status : fail(status);
}

Status AtomicFileWriter::commit() {
  if (!error_.ok()) return error_;
  assert(!committed_ && "commit called twice");
  if (!direct_write_error_.ok()) return fail(direct_write_error_);
  Status status = file_->sync();
  if (status.ok()) status = file_->close();
  if (status.ok()) status = env_.rename(temp_path_, path_);
  if (!status.ok()) return fail(status);
  committed_ = true;
  file_.reset();
  status = env_.sync_dir(parent_dir(path_));
  if (!status.ok()) {
    error_ = IOError("'" + path_ +
                     "' is in place but the rename may not survive a crash: " + status.message());
    return error_;
  }
  return Status::OK();
}

Status AtomicFileWriter::fail(Status status) {
  error_ = write_failure(path_, status);
  discard();
  return error_;
}

void AtomicFileWriter::discard() {
  file_.reset();
  Status removed = env_.remove_file(temp_path_);
  if (!removed.ok() && removed.code() != StatusCode::kNotFound) {
    MS_LOG(Warn) << "could not remove temporary file: " << removed.message();
  }
}

Status commit_directory(Env& env, const std::string& tmp_dir, const std::string& final_dir) {
  auto context = "committing '" + tmp_dir + "' as '" + final_dir + "'";
  if (!env.is_directory(tmp_dir)) {
    return NotFound(context + ": '" + tmp_dir + "' is not a directory");
  }
  if (env.exists(final_dir)) {
    Result<std::vector<std::string>> existing = env.list_dir(final_dir);
    if (!existing.ok() || !existing->empty()) {
      return AlreadyExists(context + ": '" + final_dir +
                           "' already exists; committed directories are never overwritten");
    }
  }
  Status status = sync_tree(env, tmp_dir);
  if (status.ok()) status = env.rename(tmp_dir, final_dir);
  if (!status.ok()) return status.with_context(context);
  status = env.sync_dir(parent_dir(final_dir));
  if (status.ok()) return status;
  // The rename is visible but may not survive a crash, and the caller is told it failed: take
  // it back, so that on failure `final_dir` never exists.
  if (!env.rename(final_dir, tmp_dir).ok() && !env.remove_all(final_dir).ok()) {
    return status.with_context(context + " ('" + final_dir +
                               "' is left in place: moving it back and removing it failed)");
  }
  return status.with_context(context);
}

Status commit_directory(const std::string& tmp_dir, const std::string& final_dir) {
  return commit_directory(default_env(), tmp_dir, final_dir);
}

}  // namespace ms::io
