// Writers of per-rank telemetry (<run_dir>/telemetry/rank-00003.jsonl) and traces
// (<run_dir>/trace/rank-00003.jsonl); formats in docs/formats/telemetry.md.
//
// Telemetry lines are written one append each as they happen, so a crash loses at most the line
// being written; a reader skips such an incomplete last line. Traces are far more frequent (one
// event per micro-batch and collective), so they are buffered in memory and appended by flush().
// Neither writer calls MPI: the clock offset is measured by the caller (comm/clock_offset.h)
// and passed in, so a background thread may own these writers.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "core/host_metrics.h"
#include "core/status.h"
#include "io/env.h"
#include "telemetry/schema.h"

namespace ms::telemetry {

// Extra numeric keys to add to every host record (GPU metrics, for example); called on the
// sampling thread, so it must be thread-safe.
using HostExtraFn = std::function<std::map<std::string, double>()>;

class TelemetryWriter {
 public:
  // Creates <run_dir>/telemetry/ and opens this rank's file for appending (a resumed run keeps
  // its earlier records; an incomplete last line left by a crash is cut off first), writes a
  // "meta" line, and, when host_every_s > 0, starts a thread that writes a host record at once
  // and then every host_every_s seconds. IOError naming the path when the file cannot be opened.
  static Result<std::unique_ptr<TelemetryWriter>> open(const std::string& run_dir, int rank,
                                                       const std::string& host, MeshCoord mesh,
                                                       double host_every_s);
  // The same with an Env (tests inject faults) and /proc root (tests feed crafted files).
  static Result<std::unique_ptr<TelemetryWriter>> open(io::Env& env, const std::string& run_dir,
                                                       int rank, const std::string& host,
                                                       MeshCoord mesh, double host_every_s,
                                                       const std::string& proc_root);
  ~TelemetryWriter();
  TelemetryWriter(const TelemetryWriter&) = delete;
  TelemetryWriter& operator=(const TelemetryWriter&) = delete;

  // Sets the source of extra host-record keys; call before the first sample matters.
  void set_host_extra(HostExtraFn fn);
  // Appends a step record stamped with the current wall time. Thread-safe.
  Status write_step(const StepRecord& record);
  // Appends a host record as given (simulators and tests; the sampler uses it too).
  Status write_host(const HostRecord& record);
  // Stops the sampler and closes the file. Returns the first error any write hit (a failing
  // background sample is logged once and reported here). Later writes fail.
  Status close();

  const std::string& path() const { return path_; }

 private:
  TelemetryWriter(std::unique_ptr<io::File> file, std::string path, int rank, std::string host,
                  MeshCoord mesh);
  Status append_line(const std::string& line);
  void start_sampler(double every_s, const std::string& proc_root);
  void sample_loop(double every_s);
  void sample_once(HostMetricsSampler& sampler);

  std::string path_;
  const int rank_;
  const std::string host_;
  const MeshCoord mesh_;
  std::mutex mu_;  // guards file_, first_error_, extra_fn_, stopping_
  std::condition_variable wake_;
  std::unique_ptr<io::File> file_;
  Status first_error_;
  HostExtraFn extra_fn_;
  bool stopping_ = false;
  std::unique_ptr<HostMetricsSampler> sampler_metrics_;  // used by one thread at a time
  std::thread sampler_;
};

class TraceWriter {
 public:
  // Creates <run_dir>/trace/, truncates this rank's file and writes the clock line.
  // `clock_offset_s` is comm::measure_clock_offset's offset (local - offset = rank 0 time).
  static Result<std::unique_ptr<TraceWriter>> open(const std::string& run_dir, int rank,
                                                   double clock_offset_s);
  static Result<std::unique_ptr<TraceWriter>> open(io::Env& env, const std::string& run_dir,
                                                   int rank, double clock_offset_s,
                                                   const std::string& host);
  // Flushes what is buffered; an error is logged, since a destructor cannot return it.
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Buffers one event; times are local wall-clock seconds. Thread-safe.
  void compute(std::string_view op, int stage, int mb, int64_t step, double t0, double t1);
  void comm(std::string_view op, std::string_view group, uint64_t seq, uint64_t bytes, double t0,
            double t1);
  // Appends the buffered events to the file in one write.
  Status flush();

  const std::string& path() const { return path_; }

 private:
  TraceWriter(std::unique_ptr<io::File> file, std::string path, int rank);

  std::string path_;
  const int rank_;
  std::mutex mu_;
  std::unique_ptr<io::File> file_;
  std::string buffer_;
};

}  // namespace ms::telemetry
