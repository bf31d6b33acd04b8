// Fault injection around another Env; see fault_env.h.
#include "io/fault_env.h"

#include <algorithm>
#include <cerrno>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

namespace ms::io {

namespace {

constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();

Status injected_error(std::string_view what, std::string_view path, int err) {
  return IOError("injected fault: " + ErrnoError(what, path, err).message());
}

// What the next write should do, decided under the state's lock.
struct WritePlan {
  size_t pass_bytes;  // bytes handed to the wrapped file
  Status error;       // returned after those bytes are written
};

struct ByteCorruption {
  std::string path;
  uint64_t offset;
  uint8_t mask;
};

}  // namespace

struct FaultInjectingEnv::State {
  std::mutex mu;
  int writes = 0;
  int reads = 0;
  int fail_read_at = 0;  // read number that fails; 0 = none
  uint64_t bytes_written = 0;
  int injected = 0;
  int fail_write_at = 0;   // write number that fails outright; 0 = none
  int short_write_at = 0;  // write number that is torn; 0 = none
  size_t short_write_kept = 0;
  uint64_t space_left = kNoLimit;
  bool fail_file_sync = false;
  bool fail_dir_sync = false;
  bool fail_rename = false;
  std::string rename_onto;    // renames onto this path fail; "" = none
  std::string dir_sync_path;  // its fsync number dir_sync_at fails; "" = none
  int dir_sync_at = 0;
  std::map<std::string, int> dir_syncs;  // fsyncs seen per directory
  std::vector<ByteCorruption> corruptions;

  // `block`: a failing write keeps a multiple of this many bytes.
  WritePlan plan_write(const std::string& path, uint64_t offset, size_t size, uint64_t block) {
    std::lock_guard<std::mutex> lock(mu);
    ++writes;
    std::string what =
        "write of " + std::to_string(size) + " bytes at offset " + std::to_string(offset) + " of";
    WritePlan plan{size, Status::OK()};
    if (writes == fail_write_at) {
      plan = {0, injected_error(what, path, EIO)};
    } else if (writes == short_write_at) {
      plan = {std::min(size, short_write_kept), injected_error("short " + what, path, EIO)};
    }
    if (plan.pass_bytes > space_left) {
      plan = {static_cast<size_t>(space_left), injected_error(what, path, ENOSPC)};
    }
    if (!plan.error.ok()) plan.pass_bytes -= plan.pass_bytes % block;
    if (space_left != kNoLimit) space_left -= plan.pass_bytes;
    bytes_written += plan.pass_bytes;
    if (!plan.error.ok()) ++injected;
    return plan;
  }

  // An error when this read (counted) is the one set to fail.
  Status plan_read(const std::string& path, uint64_t offset, size_t size) {
    std::lock_guard<std::mutex> lock(mu);
    if (++reads != fail_read_at) return Status::OK();
    ++injected;
    return injected_error("read of " + std::to_string(size) + " bytes at offset " +
                              std::to_string(offset) + " of",
                          path, EIO);
  }

  bool rename_fails(const std::string& to) {
    std::lock_guard<std::mutex> lock(mu);
    const bool fail = fail_rename || (!rename_onto.empty() && to == rename_onto);
    if (fail) ++injected;
    return fail;
  }

  bool dir_sync_fails(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu);
    const int n = ++dir_syncs[path];
    const bool fail = fail_dir_sync || (path == dir_sync_path && n == dir_sync_at);
    if (fail) ++injected;
    return fail;
  }

  bool fires(bool State::*flag) {
    std::lock_guard<std::mutex> lock(mu);
    if (this->*flag) ++injected;
    return this->*flag;
  }

  void corrupt(const std::string& path, uint64_t offset, std::span<std::byte> data) {
    std::lock_guard<std::mutex> lock(mu);
    for (const ByteCorruption& c : corruptions) {
      if (c.path == path && c.offset >= offset && c.offset - offset < data.size()) {
        data[c.offset - offset] ^= std::byte{c.mask};
        ++injected;
      }
    }
  }
};

namespace {

class FaultInjectingFile final : public File {
 public:
  FaultInjectingFile(std::unique_ptr<File> inner, std::shared_ptr<FaultInjectingEnv::State> state)
      : File(inner->path(), inner->append_offset()),
        inner_(std::move(inner)),
        state_(std::move(state)) {}

  File& inner() { return *inner_; }
  FaultInjectingEnv::State& state() { return *state_; }

 protected:
  Result<size_t> do_read_at(uint64_t offset, std::span<std::byte> dest) override {
    MS_RETURN_IF_ERROR(state_->plan_read(path(), offset, dest.size()));
    MS_ASSIGN_OR_RETURN(size_t got, inner_->read_at(offset, dest));
    state_->corrupt(path(), offset, dest.first(got));
    return got;
  }
  Status do_write_at(uint64_t offset, std::span<const std::byte> data) override {
    // A direct file takes whole blocks only, so its torn or filling writes keep whole blocks,
    // as a disk's do; an unaligned count would turn the injected fault into EINVAL.
    WritePlan plan =
        state_->plan_write(path(), offset, data.size(), direct_ ? kDirectIoAlignment : 1);
    if (plan.pass_bytes > 0)
      MS_RETURN_IF_ERROR(inner_->write_at(offset, data.first(plan.pass_bytes)));
    return plan.error;
  }
  Status do_sync() override {
    if (state_->fires(&FaultInjectingEnv::State::fail_file_sync))
      return injected_error("fsync", path(), EIO);
    return inner_->sync();
  }
  Status do_start_writeback(uint64_t offset, uint64_t bytes) override {
    return inner_->start_writeback(offset, bytes);
  }
  Result<bool> do_enable_direct_writes() override {
    MS_ASSIGN_OR_RETURN(direct_, inner_->enable_direct_writes());
    return direct_;
  }
  Status do_truncate(uint64_t size) override { return inner_->truncate(size); }
  Result<uint64_t> do_size() override { return inner_->size(); }
  Result<FileKind> do_kind() override { return inner_->kind(); }
  Status do_close() override { return inner_->close(); }

 private:
  std::unique_ptr<File> inner_;
  std::shared_ptr<FaultInjectingEnv::State> state_;
  bool direct_ = false;
};

}  // namespace

FaultInjectingEnv::FaultInjectingEnv(Env& base) : base_(base), state_(std::make_shared<State>()) {}
FaultInjectingEnv::~FaultInjectingEnv() = default;

void FaultInjectingEnv::fail_nth_write(int n) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->fail_write_at = state_->writes + n;
}

void FaultInjectingEnv::fail_nth_read(int n) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->fail_read_at = state_->reads + n;
}

void FaultInjectingEnv::short_write_nth(int n, size_t kept_bytes) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->short_write_at = state_->writes + n;
  state_->short_write_kept = kept_bytes;
}

void FaultInjectingEnv::enospc_after(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->space_left = bytes;
}

void FaultInjectingEnv::fail_file_sync(bool fail) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->fail_file_sync = fail;
}

void FaultInjectingEnv::fail_dir_sync(bool fail) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->fail_dir_sync = fail;
}

void FaultInjectingEnv::fail_rename(bool fail) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->fail_rename = fail;
}

void FaultInjectingEnv::fail_rename_onto(const std::string& path) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->rename_onto = path;
}

void FaultInjectingEnv::fail_nth_dir_sync_of(const std::string& path, int n) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->dir_sync_path = path;
  state_->dir_sync_at = state_->dir_syncs[path] + n;
}

int FaultInjectingEnv::dir_syncs_of(const std::string& path) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  const auto it = state_->dir_syncs.find(path);
  return it == state_->dir_syncs.end() ? 0 : it->second;
}

void FaultInjectingEnv::corrupt_on_read(const std::string& path, uint64_t offset, uint8_t mask) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->corruptions.push_back({path, offset, mask});
}

void FaultInjectingEnv::clear_faults() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->fail_write_at = 0;
  state_->fail_read_at = 0;
  state_->short_write_at = 0;
  state_->space_left = kNoLimit;
  state_->fail_file_sync = false;
  state_->fail_dir_sync = false;
  state_->fail_rename = false;
  state_->rename_onto.clear();
  state_->dir_sync_path.clear();
  state_->dir_sync_at = 0;
  state_->corruptions.clear();
}

int FaultInjectingEnv::writes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->writes;
}

int FaultInjectingEnv::reads() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->reads;
}

uint64_t FaultInjectingEnv::bytes_written() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->bytes_written;
}

int FaultInjectingEnv::injected_faults() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->injected;
}

Result<std::unique_ptr<File>> FaultInjectingEnv::open(const std::string& path, OpenMode mode) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<File> inner, base_.open(path, mode));
  return std::unique_ptr<File>(new FaultInjectingFile(std::move(inner), state_));
}

// Batches go to the wrapped Env's batched reader (io_uring included) on the inner file; the
// configured corruptions are applied to the results afterwards.
Status FaultInjectingEnv::read_ranges(File& file, std::span<const ReadRange> ranges) {
  auto* faulty = dynamic_cast<FaultInjectingFile*>(&file);
  if (faulty == nullptr) return base_.read_ranges(file, ranges);
  MS_RETURN_IF_ERROR(base_.read_ranges(faulty->inner(), ranges));
  for (const ReadRange& range : ranges) state_->corrupt(file.path(), range.offset, range.dest);
  return Status::OK();
}

Status FaultInjectingEnv::create_dir(const std::string& path) { return base_.create_dir(path); }

Status FaultInjectingEnv::rename(const std::string& from, const std::string& to) {
  if (state_->rename_fails(to)) return injected_error("rename '" + from + "' to", to, EIO);
  return base_.rename(from, to);
}

Status FaultInjectingEnv::remove_file(const std::string& path) { return base_.remove_file(path); }
Status FaultInjectingEnv::remove_dir(const std::string& path) { return base_.remove_dir(path); }

Result<std::vector<std::string>> FaultInjectingEnv::list_dir(const std::string& path) {
  return base_.list_dir(path);
}

bool FaultInjectingEnv::exists(const std::string& path) { return base_.exists(path); }
bool FaultInjectingEnv::is_directory(const std::string& path) { return base_.is_directory(path); }
bool FaultInjectingEnv::is_symlink(const std::string& path) { return base_.is_symlink(path); }

Status FaultInjectingEnv::sync_dir(const std::string& path) {
  if (state_->dir_sync_fails(path)) return injected_error("fsync directory", path, EIO);
  return base_.sync_dir(path);
}

std::string_view FaultInjectingEnv::backend_name() const { return base_.backend_name(); }

}  // namespace ms::io
