// Loss-spike guard: before an update is applied, the step's loss and gradient norm are compared
// with the last `window` accepted steps; if either lies more than `zscore` standard deviations
// above its window mean, the update is skipped (the trainer logs it) and the step does not enter
// the window, so one spike does not widen the band for the next. The guard only acts once the
// window is full. A run of kMaxConsecutiveSkips flagged steps in a row is a change of level, not
// a spike: the weights do not move while updates are skipped, so later steps would look the
// same and the run would stall for good (a pretraining whose gradient norm rose from 0.3 to 1
// skipped its last 458 of 600 updates). The next flagged step is then applied and enters the
// window (the verdict says the guard gave way). Its window and run of skips are part of the
// trainer state a checkpoint must carry, so a resumed run makes the same decisions.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "config/run_config.h"

namespace ms::train {

struct SpikeVerdict {
  bool skip = false;
  // A spike applied all the same: the guard had skipped kMaxConsecutiveSkips steps in a row.
  bool gave_way = false;
  std::string metric;  // "loss" or "grad_norm" when skip or gave_way
  double value = 0;
  double mean = 0;
  double z = 0;
  // e.g. "loss 7.91 is 8.3 standard deviations above the mean 3.12 of the last 50 steps"
  std::string describe(int64_t window) const;
};

// The guard's window, oldest first, as a checkpoint stores it.
struct SpikeGuardState {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  int64_t skipped = 0;  // updates skipped so far
  int64_t consecutive = 0;  // of which the latest in a row
  bool operator==(const SpikeGuardState&) const = default;
};

class SpikeGuard {
 public:
  static constexpr int64_t kMaxConsecutiveSkips = 5;

  explicit SpikeGuard(const config::SpikeGuardConfig& config) : config_(config) {}

  // Whether the update with this loss and gradient norm should be skipped. Never skips when the
  // guard is disabled or its window is not yet full, nor after kMaxConsecutiveSkips skips in a
  // row (gave_way).
  SpikeVerdict check(double loss, double grad_norm) const;
  // Records an applied update (drops the oldest entry once the window is full).
  void accept(double loss, double grad_norm);
  // Counts a skipped update.
  void record_skip() {
    ++skipped_;
    ++consecutive_;
  }

  SpikeGuardState state() const;
  // Replaces the window; entries beyond the configured window keep only the newest.
  void restore(const SpikeGuardState& state);

 private:
  config::SpikeGuardConfig config_;
  std::deque<double> losses_;
  std::deque<double> grad_norms_;
  int64_t skipped_ = 0;
  int64_t consecutive_ = 0;
};

}  // namespace ms::train
