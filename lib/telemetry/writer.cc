// TelemetryWriter and TraceWriter; see writer.h for the crash and buffering behaviour.
#include "telemetry/writer.h"

#include <chrono>
#include <utility>

#include "core/logging.h"
#include "core/timer.h"
#include "io/atomic_file.h"

namespace ms::telemetry {

namespace {

// A crash can leave a partial last line; appending after it would glue the next record onto
// it. Cut the file back to its last complete line (atomically) before appending.
Status drop_incomplete_tail(io::Env& env, const std::string& path) {
  if (!env.exists(path)) return Status::OK();
  MS_ASSIGN_OR_RETURN(std::string text,
                      io::read_file(env, path, io::kMaxTextFileBytes, "telemetry file"));
  if (text.empty() || text.back() == '\n') return Status::OK();
  const size_t last_newline = text.rfind('\n');
  const size_t keep = last_newline == std::string::npos ? 0 : last_newline + 1;
  MS_LOG(Warn) << path << ": dropping an incomplete last line (" << text.size() - keep
               << " bytes) left by an earlier crash";
  return io::write_file_atomic(env, path, std::string_view(text).substr(0, keep));
}

}  // namespace

Result<std::unique_ptr<TelemetryWriter>> TelemetryWriter::open(const std::string& run_dir,
                                                               int rank, const std::string& host,
                                                               MeshCoord mesh,
                                                               double host_every_s) {
  return open(io::default_env(), run_dir, rank, host, mesh, host_every_s, "/proc");
}

Result<std::unique_ptr<TelemetryWriter>> TelemetryWriter::open(
    io::Env& env, const std::string& run_dir, int rank, const std::string& host, MeshCoord mesh,
    double host_every_s, const std::string& proc_root) {
  const std::string dir = run_dir + "/telemetry";
  MS_RETURN_IF_ERROR(env.create_dirs(dir).with_context("creating the telemetry directory"));
  const std::string path = rank_file_path(dir, rank);
  MS_RETURN_IF_ERROR(drop_incomplete_tail(env, path));
  MS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file, env.open(path, io::OpenMode::kReadWrite));
  std::unique_ptr<TelemetryWriter> writer(
      new TelemetryWriter(std::move(file), path, rank, host, mesh));
  MS_RETURN_IF_ERROR(writer->append_line(telemetry_meta_json(rank, host, mesh)));
  if (host_every_s > 0) writer->start_sampler(host_every_s, proc_root);
  return writer;
}

TelemetryWriter::TelemetryWriter(std::unique_ptr<io::File> file, std::string path, int rank,
                                 std::string host, MeshCoord mesh)
    : path_(std::move(path)), rank_(rank), host_(std::move(host)), mesh_(mesh),
      file_(std::move(file)) {}

TelemetryWriter::~TelemetryWriter() {
  Status status = close();
  if (!status.ok()) MS_LOG(Warn) << "telemetry " << path_ << ": " << status.to_string();
}

void TelemetryWriter::set_host_extra(HostExtraFn fn) {
  std::lock_guard<std::mutex> lock(mu_);
  extra_fn_ = std::move(fn);
}

Status TelemetryWriter::write_step(const StepRecord& record) {
  StepRecordRead line;
  line.t = wall_time_s();
  line.host = host_;
  line.rank = rank_;
  line.mesh = mesh_;
  line.step = record;
  return append_line(step_record_json(line));
}

Status TelemetryWriter::write_host(const HostRecord& record) {
  return append_line(host_record_json(record));
}

// One append per line: the line reaches the file in one write, so a crash of this process
// leaves at most the line being written incomplete.
Status TelemetryWriter::append_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return FailedPrecondition("telemetry " + path_ + " is already closed");
  Status status = file_->append(line + "\n");
  if (!status.ok() && first_error_.ok()) first_error_ = status;
  return status;
}

// The first sample is taken before open() returns, so every file starts with a host record;
// later ones come from the thread.
void TelemetryWriter::start_sampler(double every_s, const std::string& proc_root) {
  sampler_metrics_ = std::make_unique<HostMetricsSampler>(proc_root);
  sample_once(*sampler_metrics_);
  sampler_ = std::thread([this, every_s] { sample_loop(every_s); });
}

void TelemetryWriter::sample_loop(double every_s) {
  const auto period = std::chrono::duration<double>(every_s);
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    sample_once(*sampler_metrics_);
    lock.lock();
  }
}

void TelemetryWriter::sample_once(HostMetricsSampler& sampler) {
  Result<HostMetrics> metrics = sampler.sample();
  if (!metrics.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.ok()) {
      MS_LOG(Warn) << "telemetry host sample failed: " << metrics.status().to_string();
      first_error_ = metrics.status();
    }
    return;
  }
  HostRecord record;
  record.t = wall_time_s();
  record.host = host_;
  record.rank = rank_;
  record.cpu_util = metrics->cpu_util;
  record.mem_used = static_cast<double>(metrics->mem_used);
  record.net_tx_bytes = static_cast<double>(metrics->net_tx_bytes);
  record.net_rx_bytes = static_cast<double>(metrics->net_rx_bytes);
  record.extra["mem_total"] = static_cast<double>(metrics->mem_total);
  record.extra["mem_available"] = static_cast<double>(metrics->mem_available);
  record.extra["rss_bytes"] = static_cast<double>(metrics->rss_bytes);
  record.extra["proc_cpu_util"] = metrics->proc_cpu_util;
  HostExtraFn extra_fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    extra_fn = extra_fn_;
  }
  if (extra_fn) {
    for (const auto& [key, value] : extra_fn()) record.extra[key] = value;
  }
  (void)write_host(record);  // a failure is kept in first_error_ and returned by close()
}

Status TelemetryWriter::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (sampler_.joinable()) sampler_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) {
    Status closed = file_->close();
    file_.reset();
    if (!closed.ok() && first_error_.ok()) first_error_ = closed;
  }
  return first_error_;
}

Result<std::unique_ptr<TraceWriter>> TraceWriter::open(const std::string& run_dir, int rank,
                                                       double clock_offset_s) {
  return open(io::default_env(), run_dir, rank, clock_offset_s, log::host());
}

Result<std::unique_ptr<TraceWriter>> TraceWriter::open(io::Env& env, const std::string& run_dir,
                                                       int rank, double clock_offset_s,
                                                       const std::string& host) {
  const std::string dir = run_dir + "/trace";
  MS_RETURN_IF_ERROR(env.create_dirs(dir).with_context("creating the trace directory"));
  const std::string path = rank_file_path(dir, rank);
  MS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file, env.open(path, io::OpenMode::kTruncate));
  MS_RETURN_IF_ERROR(file->append(trace_clock_json(rank, host, clock_offset_s) + "\n"));
  return std::unique_ptr<TraceWriter>(new TraceWriter(std::move(file), path, rank));
}

TraceWriter::TraceWriter(std::unique_ptr<io::File> file, std::string path, int rank)
    : path_(std::move(path)), rank_(rank), file_(std::move(file)) {}

TraceWriter::~TraceWriter() {
  Status status = flush();
  if (!status.ok()) MS_LOG(Warn) << "trace " << path_ << ": " << status.to_string();
}

void TraceWriter::compute(std::string_view op, int stage, int mb, int64_t step, double t0,
                          double t1) {
  std::string line = compute_event_json(rank_, op, stage, mb, step, t0, t1);
  std::lock_guard<std::mutex> lock(mu_);
  buffer_ += line;
  buffer_ += '\n';
}

void TraceWriter::comm(std::string_view op, std::string_view group, uint64_t seq, uint64_t bytes,
                       double t0, double t1) {
  std::string line = comm_event_json(rank_, op, group, seq, bytes, t0, t1);
  std::lock_guard<std::mutex> lock(mu_);
  buffer_ += line;
  buffer_ += '\n';
}

Status TraceWriter::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (buffer_.empty()) return Status::OK();
  Status status = file_->append(buffer_);
  if (status.ok()) buffer_.clear();
  return status.with_context("appending to trace " + path_);
}

}  // namespace ms::telemetry
