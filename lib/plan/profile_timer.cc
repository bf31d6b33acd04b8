// Timing with spread and load; see profile_timer.h.
#include "plan/profile_timer.h"

#include <algorithm>
#include <optional>

#include "core/timer.h"

namespace ms::plan {
namespace {

double nth(std::vector<double>& times, size_t index) {
  const auto it = times.begin() + static_cast<std::ptrdiff_t>(index);
  std::nth_element(times.begin(), it, times.end());
  return *it;
}

}  // namespace

double lower_quartile(std::vector<double> times) {
  return times.empty() ? 0 : nth(times, times.size() / 4);
}

double quartile_spread(std::vector<double> times) {
  if (times.empty()) return 0;
  const double lower = nth(times, times.size() / 4);
  const double upper = nth(times, std::min(times.size() - 1, times.size() * 3 / 4));
  return lower > 0 ? (upper - lower) / lower : 0;
}

std::vector<double> sample_calls(const std::function<void()>& op, double min_seconds,
                                 size_t min_calls) {
  op();  // warm: page faults, BLAS buffers
  std::vector<double> times;
  double total = 0;
  while (total < min_seconds || times.size() < min_calls) {
    Stopwatch watch;
    op();
    times.push_back(watch.elapsed_s());
    total += times.back();
  }
  return times;
}

ProfileTimer::ProfileTimer(double min_seconds, LoadSource load, int max_attempts)
    : min_seconds_(min_seconds), load_(std::move(load)), max_attempts_(std::max(1, max_attempts)) {}

ProfileTimer::LoadSource ProfileTimer::default_load() {
  return [] { return read_load("/proc"); };
}

double ProfileTimer::time(const std::function<void()>& op) {
  Result<std::vector<double>> t = time_sets(
      [&]() -> Result<std::vector<std::vector<double>>> {
        return std::vector<std::vector<double>>{sample_calls(op, min_seconds_)};
      });
  return t.ok() ? t->front() : 0;  // collect cannot fail here
}

Result<std::vector<double>> ProfileTimer::time_sets(
    const std::function<Result<std::vector<std::vector<double>>>()>& collect) {
  std::vector<std::vector<double>> kept;
  std::optional<std::pair<LoadReading, LoadReading>> kept_load;
  double kept_share = 2;
  for (int attempt = 0; attempt < max_attempts_; ++attempt) {
    Result<LoadReading> before = load_ ? load_() : Result<LoadReading>(Unavailable("no meter"));
    MS_ASSIGN_OR_RETURN(std::vector<std::vector<double>> sets, collect());
    Result<LoadReading> after = before.ok() ? load_() : before;
    if (!before.ok() || !after.ok()) {  // not metered: the one attempt stands
      kept = std::move(sets);
      kept_load.reset();
      break;
    }
    const double share = others_share(*before, *after);
    if (share < kept_share) {
      kept = std::move(sets);
      kept_load.emplace(*before, *after);
      kept_share = share;
    }
    if (share < kDisturbedLoadShare) break;
    if (attempt + 1 < max_attempts_) ++repeated_;
  }
  if (kept_load) tally_.add(kept_load->first, kept_load->second);
  std::vector<double> out;
  for (const std::vector<double>& set : kept) {
    spreads_.push_back(quartile_spread(set));
    out.push_back(lower_quartile(set));
  }
  return out;
}

ProfileQuality ProfileTimer::quality() const {
  ProfileQuality q;
  if (!spreads_.empty()) {
    std::vector<double> s = spreads_;
    q.spread = nth(s, s.size() / 2);
  }
  q.load_share = tally_.share();
  q.repeated = repeated_;
  return q;
}

}  // namespace ms::plan
