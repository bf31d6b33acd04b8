// Warm-up plus decay schedules; see schedule.h for the formulas.
#include "train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ms::train {

double learning_rate(const config::OptimConfig& optim, int64_t step, int64_t total_steps) {
  const int64_t warmup = optim.warmup_steps;
  if (warmup > 0 && step <= warmup) {
    return optim.lr * static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(warmup);
  }
  const double decay_steps = static_cast<double>(std::max<int64_t>(total_steps - warmup, 1));
  const double progress =
      std::clamp(static_cast<double>(step - warmup) / decay_steps, 0.0, 1.0);
  const double span = optim.lr - optim.min_lr;
  switch (optim.schedule) {
    case config::LrSchedule::kCosine:
      return optim.min_lr + span * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    case config::LrSchedule::kLinear:
      return optim.lr - span * progress;
    case config::LrSchedule::kConstant:
      break;
  }
  return optim.lr;
}

}  // namespace ms::train
