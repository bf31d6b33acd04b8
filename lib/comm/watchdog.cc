// Watchdog thread and the in-flight report it writes; see watchdog.h. The thread only reads the
// record under a mutex, logs, and writes a file: it never calls MPI or CUDA.
#include "comm/watchdog.h"

#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "core/logging.h"
#include "core/rank_file.h"
#include "core/timer.h"
#include "io/atomic_file.h"

namespace ms::comm {
namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? "," : "") << ranks[i];
  out << ']';
  return out.str();
}

// Creates <dir>/inflight/ when needed, then replaces the file atomically.
Status write_report(const std::string& path, const std::string& json) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) return ErrnoError("creating directory", parent.string(), ec.value());
  return io::write_file_atomic(path, json);
}

}  // namespace

CallStack CallStack::capture() {
  CallStack stack;
  stack.depth = backtrace(stack.frames.data(), kMaxFrames);
  return stack;
}

std::vector<std::string> CallStack::symbolize() const {
  std::vector<std::string> lines;
  if (depth <= 0) return lines;
  char** symbols = backtrace_symbols(frames.data(), depth);
  if (symbols == nullptr) return lines;
  for (int i = 0; i < depth; ++i) lines.emplace_back(symbols[i]);
  std::free(symbols);
  return lines;
}

InflightOp make_inflight_op(const char* op, const std::string& group, std::vector<int> group_ranks,
                            uint64_t seq, uint64_t bytes) {
  InflightOp info;
  info.op = op;
  info.group = group;
  info.group_ranks = std::move(group_ranks);
  info.seq = seq;
  info.bytes = bytes;
  info.start_wall_s = wall_time_s();
  info.start = std::chrono::steady_clock::now();
  info.stack = CallStack::capture();
  return info;
}

std::string inflight_report_json(const InflightOp& op, int rank, const std::string& host,
                                 double now_wall_s, double waiting_s) {
  nlohmann::json doc;
  doc["rank"] = rank;
  doc["host"] = host;
  doc["pid"] = static_cast<int64_t>(getpid());
  doc["t"] = now_wall_s;
  doc["op"] = op.op;
  doc["group"] = op.group;
  doc["group_ranks"] = op.group_ranks;
  doc["seq"] = op.seq;
  doc["bytes"] = op.bytes;
  doc["waiting_s"] = waiting_s;
  doc["stack"] = op.stack.symbolize();
  return doc.dump(2) + "\n";
}

std::string inflight_report_path(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / "inflight" / rank_file_name(rank, ".json")).string();
}

Result<std::shared_ptr<Watchdog>> Watchdog::start(WatchdogOptions options) {
  if (!(options.timeout_s > 0)) {
    return InvalidArgument("watchdog timeout must be > 0 seconds (got " +
                           std::to_string(options.timeout_s) + ")");
  }
  if (options.dir.empty()) return InvalidArgument("watchdog needs a directory for its reports");
  if (options.poll_s <= 0) options.poll_s = std::min(options.timeout_s / 4, 1.0);
  return std::shared_ptr<Watchdog>(new Watchdog(std::move(options)));
}

Watchdog::Watchdog(WatchdogOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::begin(InflightOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  current_ = std::move(op);
  active_ = true;
  reported_ = false;
}

void Watchdog::end() {
  std::lock_guard<std::mutex> lock(mu_);
  active_ = false;
}

int Watchdog::reports_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reports_written_;
}

Status Watchdog::last_report_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_report_status_;
}

void Watchdog::run() {
  const auto poll = std::chrono::duration<double>(options_.poll_s);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, poll);
    if (stopping_ || !active_ || reported_) continue;
    const double waiting_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - current_.start).count();
    if (waiting_s < options_.timeout_s) continue;
    reported_ = true;
    const InflightOp op = current_;
    lock.unlock();
    report(op, waiting_s);
    lock.lock();
  }
}

void Watchdog::report(const InflightOp& op, double waiting_s) {
  const int rank = log::rank();
  const std::string path = inflight_report_path(options_.dir, rank);
  MS_LOG(Error) << "watchdog: " << op.op << " on group '" << op.group << "' (seq " << op.seq << ", "
                << op.bytes << " bytes, group world ranks " << ranks_text(op.group_ranks)
                << ") has waited " << waiting_s << " s, past the " << options_.timeout_s
                << " s timeout; a peer may be hung or dead. Report: " << path;
  Status status =
      write_report(path, inflight_report_json(op, rank, log::host(), wall_time_s(), waiting_s));
  if (!status.ok()) MS_LOG(Error) << "watchdog: could not write its report: " << status.to_string();
  std::lock_guard<std::mutex> lock(mu_);
  if (status.ok()) ++reports_written_;
  last_report_status_ = std::move(status);
}

InflightScope::InflightScope(Watchdog* watchdog, InflightOp op) : watchdog_(watchdog) {
  if (watchdog_) watchdog_->begin(std::move(op));
}

InflightScope::~InflightScope() {
  if (watchdog_) watchdog_->end();
}

}  // namespace ms::comm
