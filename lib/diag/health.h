// The verdict of `ms-diagnose check` as a pure function over measurements, so it can be tested on
// injected numbers. Every metric is "higher is better" (GFLOP/s, GB/s). A rank or host is a
// suspect for a metric only when it is both
//   - a statistical outlier: robust z-score (median/MAD, diag/robust_stats.h) below
//     -z_threshold against its peers, and
//   - practically worse: at least min_degradation (default 20%) below the peers' median,
// so the ordinary noise of shared cores, which can make one value a statistical outlier when the
// others happen to agree closely, raises no alarm. A population needs at least 3 members: with
// two, neither can be told to be the odd one out.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "telemetry/schema.h"

namespace ms::diag {

// One rank's benchmark results, metric name -> value (higher is better).
struct RankMeasurement {
  int rank = 0;
  std::string host;
  std::map<std::string, double> metrics;
  // Faults the rank found itself, not by comparison: a GPU probe that failed, a GPU the NVML
  // rules call bad or suspect (diag/gpu_check.h). Any one makes the rank's machine a suspect.
  std::vector<std::string> faults;
};

struct HealthOptions {
  double z_threshold = 3.5;      // Iglewicz-Hoaglin's customary cut for robust z-scores
  double min_degradation = 0.2;  // fraction below the median that counts as practically worse
  telemetry::GroupBy group_by = telemetry::GroupBy::kHost;
};

inline constexpr size_t kMinPeers = 3;

// Why a rank or machine is suspect for one metric.
struct Finding {
  std::string subject;  // "rank3" (rank level) or the machine name (machine level)
  std::string metric;
  double value = 0;
  double median = 0;       // of the population it was compared with
  double robust_z = 0;     // may be -infinity when the population's MAD is 0
  double degradation = 0;  // (median - value) / median
};

struct MachineVerdict {
  std::string machine;  // host name, or "rank<N>" when grouping by rank
  std::vector<int> ranks;
  bool suspect = false;
  std::vector<Finding> findings;  // rank-level and machine-level findings that concern it
  std::vector<std::string> faults;  // its ranks' faults, as "rank3: GPU 1 (...): bad: ..."
};

struct HealthReport {
  std::vector<MachineVerdict> machines;  // ordered by their lowest rank
  bool any_suspect() const;
};

// Tests `value` against `population` (which may include it). Returns true and fills `finding`
// (all but subject and metric) when it is both a statistical outlier and practically worse.
bool is_suspect_value(double value, std::span<const double> population,
                      const HealthOptions& options, Finding& finding);

// Rank level: each rank against all ranks, per metric. Machine level: each machine's median
// over its ranks against the other machines (only when some machine holds several ranks).
// A machine is a suspect when it, or one of its ranks, is, or when one of its ranks reported a
// fault.
HealthReport assess_health(std::span<const RankMeasurement> ranks, const HealthOptions& options);

}  // namespace ms::diag
