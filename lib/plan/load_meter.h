// How much of the node other processes take while `ms-train plan --profile` measures: the
// node's busy CPU time (/proc/stat) less this process's own (/proc/self/stat), over the node's
// whole CPU time between two readings. A timing taken while another process held a core is
// slow by what it lost, and a cluster file measured so predicts every layout slow; the profile
// repeats such timings and records the share (cluster.h's ProfileQuality).
#pragma once

#include <string>

#include "core/host_metrics.h"
#include "core/status.h"

namespace ms::plan {

struct LoadReading {
  CpuTimes node;          // jiffies since boot, every core
  double own_ticks = 0;   // this process's user + system time, in the same clock ticks
};

// Reads `proc_root`/stat and `proc_root`/self/stat ("/proc" except in tests). Errors name the
// file.
Result<LoadReading> read_load(const std::string& proc_root = "/proc");

// The share of the node's CPU time between `before` and `after` that other processes used, in
// [0, 1]; 0 when no time passed.
double others_share(const LoadReading& before, const LoadReading& after);

// Accumulates others' CPU time over several measured windows (the load of a whole profile).
class LoadTally {
 public:
  void add(const LoadReading& before, const LoadReading& after);
  double share() const { return total_ > 0 ? others_ / total_ : 0; }

 private:
  double others_ = 0, total_ = 0;
};

}  // namespace ms::plan
