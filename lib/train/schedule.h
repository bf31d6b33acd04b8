// Learning-rate schedules: linear warm-up from 0 to the peak rate, then cosine, linear or
// constant decay down to a floor (optim.min_lr). A pure function of the step, so a resumed run
// needs only the step number to continue the schedule exactly.
#pragma once

#include <cstdint>

#include "config/run_config.h"

namespace ms::train {

// Learning rate for optimizer step `step` (1-based: the first update is step 1) of a run of
// `total_steps` steps. Warm-up: lr * step / warmup_steps for step <= warmup_steps. Decay: the
// progress p = (step - warmup) / (total_steps - warmup), clamped to [0, 1], maps to
//   cosine:   min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2
//   linear:   lr - (lr - min_lr) * p
//   constant: lr
// so the rate never falls below min_lr after warm-up.
double learning_rate(const config::OptimConfig& optim, int64_t step, int64_t total_steps);

}  // namespace ms::train
