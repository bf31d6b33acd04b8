// Follows a run's telemetry directory (run.dir/telemetry/rank-*.jsonl) while the job writes it:
// each poll reads only the complete lines the files gained, so watching a long run costs what
// it writes, not what it has written. The supervisor takes heartbeats (each rank's latest step
// record) and the live input of `detect` from it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "telemetry/reader.h"

namespace ms::supervise {

class LiveTelemetry {
 public:
  explicit LiveTelemetry(std::string dir) : dir_(std::move(dir)) {}

  // Reads what the files gained; returns the step records among it, in file order. A missing
  // directory is no news. A line that is not a valid record is passed over and named in
  // skipped(): stopping there would hide every later heartbeat of every rank (a false hang).
  // Such lines come from two processes writing one rank file (an ended attempt's rank that
  // outlived its launcher, beside the restarted one) or a file damaged in storage; a crash
  // alone leaves none, since the writer drops a torn last line before it appends.
  // InvalidArgument for a line longer than a text file may be.
  Result<std::vector<telemetry::StepRecordRead>> poll();
  // What the last poll passed over: "file:line: what is wrong", a line each.
  const std::vector<std::string>& skipped() const { return skipped_; }
  // Every rank file's records from time `t` on (files with none are left out).
  std::vector<telemetry::RankTelemetry> since(double t) const;
  // Drops records older than `t`, which bounds the memory a long run takes.
  void forget_before(double t);

 private:
  struct File {
    uint64_t offset = 0;     // bytes consumed
    size_t next_line = 1;    // the line number at offset
    telemetry::RankTelemetry records;
  };
  std::string dir_;
  std::map<std::string, File> files_;  // by path
  std::vector<std::string> skipped_;
};

}  // namespace ms::supervise
