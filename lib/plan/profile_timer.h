// The timing discipline of `ms-train plan --profile`: every op is called repeatedly and taken at
// the lower quartile of its calls (not the best: the trainer's ops run under whatever else the
// machine does; not the mean: one call descheduled by another process would count in full). The
// timer also keeps what the figures are worth: the spread of each op's calls (upper over lower
// quartile), from which a prediction's error band comes, and, where it meters load, the share of
// the node's CPU other processes took while it timed (load_meter.h); a timing taken under load
// (at least kDisturbedLoadShare) is repeated, up to `max_attempts` in all, keeping the quietest.
#pragma once

#include <functional>
#include <vector>

#include "core/status.h"
#include "plan/cluster.h"
#include "plan/load_meter.h"

namespace ms::plan {

// The lower quartile of `times` and (upper quartile - lower quartile) / lower quartile.
double lower_quartile(std::vector<double> times);
double quartile_spread(std::vector<double> times);

// Seconds per call of `op` over a warm-up call and then at least `min_calls` calls and
// `min_seconds` in all.
std::vector<double> sample_calls(const std::function<void()>& op, double min_seconds,
                                 size_t min_calls = 8);

class ProfileTimer {
 public:
  using LoadSource = std::function<Result<LoadReading>()>;
  // `load`: how to read the node's load (read_load of /proc by default); empty: no metering and
  // no repeats (ranks that time together must stay in step, and their load is each other).
  explicit ProfileTimer(double min_seconds, LoadSource load = default_load(),
                        int max_attempts = 2);
  static LoadSource default_load();

  // `op`'s seconds per call (sample_calls' lower quartile).
  double time(const std::function<void()>& op);
  // `collect` measures once and returns sets of seconds per call (a layer's forward and its
  // backward); each set's lower quartile, from the quietest attempt.
  Result<std::vector<double>> time_sets(
      const std::function<Result<std::vector<std::vector<double>>>()>& collect);

  double min_seconds() const { return min_seconds_; }
  // The median spread of every timed set, the load the kept timings ran under, and how many
  // timings were repeated. A reading of /proc that fails only stops the metering.
  ProfileQuality quality() const;

 private:
  double min_seconds_;
  LoadSource load_;
  int max_attempts_;
  std::vector<double> spreads_;
  LoadTally tally_;
  int repeated_ = 0;
};

}  // namespace ms::plan
