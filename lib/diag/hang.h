// Hang analysis for `ms-diagnose hang`: reads the in-flight reports the communication watchdog
// writes when a collective waits too long (<dir>/inflight/rank-00003.json, comm/watchdog.h),
// groups ranks by what they wait on, and names the outliers: a rank that a blocked group waits
// for but that is not waiting with it (no report at all: busy outside communication, hung in
// compute or dead), or that waits in the same group on an earlier operation (behind) or a
// different operation of the same number (a mismatched program). Ranks that wait in another
// group are the usual cascade of one stuck rank and are named only when nothing else explains
// the hang.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/mesh.h"
#include "core/status.h"

namespace ms::diag {

// One rank's report, as written by comm::inflight_report_json.
struct InflightReport {
  int rank = 0;
  std::string host;
  int64_t pid = 0;
  double t = 0;
  std::string op;
  std::string group;
  std::vector<int> group_ranks;
  uint64_t seq = 0;
  uint64_t bytes = 0;
  double waiting_s = 0;
  std::vector<std::string> stack;
};

// Parses one report; Corruption naming `source` and the key when a key is missing or mistyped.
Result<InflightReport> parse_inflight_report(std::string_view text, const std::string& source);
// Reads every rank-*.json of `dir`, or of `dir`/inflight when `dir` is a run directory, ordered
// by rank. An empty or missing inflight directory gives an empty list (no hang evidence);
// NotFound when `dir` itself does not exist.
Result<std::vector<InflightReport>> read_inflight_reports(const std::string& dir);

// Ranks blocked in the same operation: same op, group name, member list and sequence number.
struct WaitGroup {
  std::string op;
  std::string group;
  uint64_t seq = 0;
  std::vector<int> group_ranks;
  std::vector<int> ranks;  // those waiting in it
  double max_waiting_s = 0;
};

enum class OutlierKind {
  kNotWaiting,   // wrote no report although a blocked group waits for it
  kBehind,       // waits in the same group on an earlier operation
  kAhead,        // waits in the same group on a later operation
  kMismatch,     // waits on a different operation with the same sequence number
  kWaitsElsewhere,  // waits in another group (named only when no other outlier exists)
};
std::string_view outlier_kind_name(OutlierKind kind);

struct HangOutlier {
  int rank = 0;
  OutlierKind kind = OutlierKind::kNotWaiting;
  std::string explanation;  // one sentence naming what the others wait on
  int report = -1;          // index into the reports, or -1 when the rank wrote none
};

struct HangAnalysis {
  std::vector<WaitGroup> groups;  // largest first
  std::vector<HangOutlier> outliers;
};

// Pure analysis over `reports` (in any order).
HangAnalysis analyze_hang(std::span<const InflightReport> reports);

// Parses "pp=1,dp=2,tp=2" (keys pp, dp, cp, tp, ep, loaders in any order; missing ones are 1,
// or 0 for loaders). InvalidArgument naming the bad part otherwise.
Result<comm::MeshShape> parse_mesh_shape(std::string_view text);

// "pp=0 dp=1 tp=1" ("pp=0 dp=1 cp=0 tp=1" when the mesh's cp is not 1) for `rank` under
// `layout`, "loader" for a loader rank, or "" when there is no layout or the rank is outside
// it.
std::string mesh_label(const comm::MeshLayout* layout, int rank);

// The human-readable report: waiting groups, then each outlier with its mesh coordinates and
// stack.
std::string format_hang_report(const HangAnalysis& analysis,
                               std::span<const InflightReport> reports,
                               const comm::MeshLayout* layout);

}  // namespace ms::diag
