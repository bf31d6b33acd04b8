// Readers of telemetry and trace directories, for ms-diagnose. Every line is validated: a line
// that is not JSON, or lacks a key its kind requires, is a Corruption error naming file:line
// and the key; the one exception is an incomplete last line (no trailing newline: the writer
// crashed mid-line), which is skipped with a warning. Unknown keys and unknown record kinds are
// ignored, so newer writers stay readable; a newer major format version is refused.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "telemetry/schema.h"

namespace ms::telemetry {

struct RankTelemetry {
  int rank = 0;
  std::string path;  // the file the records were read from (records carry their line)
  std::string host;  // from the file's records; empty for a file with none
  std::vector<HostRecord> hosts;
  std::vector<StepRecordRead> steps;
};

// Reads one rank file (its rank is taken from the records; the file name is not trusted).
// Times (t, t0, t1, offset_s) beyond +-kMaxAbsTimeS are Corruption naming file:line and key.
Result<RankTelemetry> read_telemetry_file(const std::string& path);
// Appends the records of `text`, lines of out.path numbered from `first_line` on, to `out` (for
// readers that follow a file as it grows). An incomplete last line is skipped with a warning,
// so callers pass complete lines only. out.rank is set by the first record; -1 while `out`
// holds none.
Status append_telemetry_lines(std::string_view text, size_t first_line, RankTelemetry& out);
// Reads every rank-*.jsonl in `dir`, ordered by rank. NotFound when the directory is missing or
// holds no rank files; Corruption when two files claim the same rank.
Result<std::vector<RankTelemetry>> read_telemetry_dir(const std::string& dir);

// One rank's trace with times shifted to rank 0's clock, sorted by t0.
Result<std::vector<TraceEvent>> read_trace_file(const std::string& path);
// The longest span a trace directory's events may cover (30 days), on rank 0's clock.
inline constexpr double kMaxTraceSpanS = 30 * 86400.0;

// Every rank-*.jsonl in `dir`: element r holds rank r's events. The ranks must be 0..N-1 with
// none missing (NotFound naming the first missing rank), since a what-if replay needs them all.
// Corruption naming both events' file:line when the events span more than kMaxTraceSpanS.
Result<std::vector<std::vector<TraceEvent>>> read_trace_dir(const std::string& dir);

}  // namespace ms::telemetry
