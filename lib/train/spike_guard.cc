// Z-score spike detection over a window of accepted steps; see spike_guard.h.
#include "train/spike_guard.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ms::train {
namespace {

struct WindowStats {
  double mean = 0;
  double stddev = 0;
};

WindowStats stats_of(const std::deque<double>& window) {
  WindowStats s;
  for (const double x : window) s.mean += x;
  s.mean /= static_cast<double>(window.size());
  double var = 0;
  for (const double x : window) var += (x - s.mean) * (x - s.mean);
  s.stddev = std::sqrt(var / static_cast<double>(window.size()));
  return s;
}

// z-score of `value` against `window`. A perfectly flat window gets a tiny relative deviation
// floor, so that any real jump above it still counts as a spike instead of dividing by zero.
double zscore_of(double value, const std::deque<double>& window, double* mean) {
  const WindowStats s = stats_of(window);
  *mean = s.mean;
  const double floor = 1e-6 * std::fabs(s.mean) + 1e-12;
  return (value - s.mean) / std::max(s.stddev, floor);
}

void push_bounded(std::deque<double>& window, double value, size_t limit) {
  window.push_back(value);
  while (window.size() > limit) window.pop_front();
}

}  // namespace

std::string SpikeVerdict::describe(int64_t window) const {
  char text[200];
  std::snprintf(text, sizeof(text),
                "%s %.6g is %.1f standard deviations above the mean %.6g of the last %lld steps",
                metric.c_str(), value, z, mean, static_cast<long long>(window));
  return text;
}

SpikeVerdict SpikeGuard::check(double loss, double grad_norm) const {
  SpikeVerdict verdict;
  if (!config_.enabled || losses_.size() < static_cast<size_t>(config_.window)) return verdict;
  struct Metric {
    const char* name;
    double value;
    const std::deque<double>* window;
  };
  const Metric metrics[] = {{"loss", loss, &losses_}, {"grad_norm", grad_norm, &grad_norms_}};
  for (const Metric& metric : metrics) {
    double mean = 0;
    const double z = zscore_of(metric.value, *metric.window, &mean);
    if (z > config_.zscore) {
      const bool give_way = consecutive_ >= kMaxConsecutiveSkips;
      return {!give_way, give_way, metric.name, metric.value, mean, z};
    }
  }
  return verdict;
}

void SpikeGuard::accept(double loss, double grad_norm) {
  const size_t limit = static_cast<size_t>(config_.window);
  push_bounded(losses_, loss, limit);
  push_bounded(grad_norms_, grad_norm, limit);
  consecutive_ = 0;
}

SpikeGuardState SpikeGuard::state() const {
  SpikeGuardState s;
  s.losses.assign(losses_.begin(), losses_.end());
  s.grad_norms.assign(grad_norms_.begin(), grad_norms_.end());
  s.skipped = skipped_;
  s.consecutive = consecutive_;
  return s;
}

void SpikeGuard::restore(const SpikeGuardState& state) {
  losses_.clear();
  grad_norms_.clear();
  const size_t limit = static_cast<size_t>(config_.window);
  for (const double x : state.losses) push_bounded(losses_, x, limit);
  for (const double x : state.grad_norms) push_bounded(grad_norms_, x, limit);
  skipped_ = state.skipped;
  consecutive_ = state.consecutive;
}

}  // namespace ms::train
