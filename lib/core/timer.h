// Time measurement. Durations use the monotonic clock (immune to NTP steps); timestamps written
// to telemetry and traces use wall_time_s(), seconds since the Unix epoch as a double, which is
// the unit every artifact of the toolkit records.
#pragma once

#include <chrono>

namespace ms {

// Seconds since the Unix epoch (system clock), with sub-microsecond resolution.
inline double wall_time_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Measures elapsed time on the monotonic clock from construction or the last reset().
class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  void reset() { start_ = Clock::now(); }
  double elapsed_s() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  // Returns the elapsed time and restarts the measurement.
  double lap_s() {
    const Clock::time_point now = Clock::now();
    const double s = std::chrono::duration<double>(now - start_).count();
    start_ = now;
    return s;
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

// Adds the time between its construction and destruction to `*total_s`: the per-step phase
// accounting (fwd_s, bwd_s, comm_wait_s, ...) of the telemetry step records.
class ScopedTimer {
 public:
  explicit ScopedTimer(double& total_s) : total_s_(total_s) {}
  ~ScopedTimer() { total_s_ += watch_.elapsed_s(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double& total_s_;
  Stopwatch watch_;
};

}  // namespace ms
