// One candidate parallel layout: the parallel.* and train.micro_batch values a run would take,
// how it is written as --set flags, and whether the trainer accepts it (the trainer's own
// checks: train/run_checks.h, parallel/tp_layout.h, model validation), so the search offers
// only layouts `ms-train` runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"

namespace ms::plan {

struct Layout {
  // world = pp x dp x cp x tp; ep folds over dp x cp (train/run_checks.h).
  int dp = 1, tp = 1, pp = 1, vpp = 1, ep = 1, cp = 1;
  std::string schedule = "1f1b";
  int64_t micro_batch = 1;
  bool zero = true;
  config::Recompute recompute = config::Recompute::kNone;
  bool sequence_parallel = true;  // meaningful with tp > 1
  bool operator==(const Layout&) const = default;

  int64_t micro_batches(int64_t global_batch) const { return global_batch / (dp * micro_batch); }
};

// The layout `config` describes on `world_size` ranks (dp from the world, the rest from
// parallel.* and train.micro_batch). The trainer's errors when it does not run.
Result<Layout> layout_of(const config::RunConfig& config, int world_size);

// `config` with `layout` applied (parallel.* and train.micro_batch; pp_layers cleared, an even
// split; no loader ranks, which context parallelism refuses).
config::RunConfig apply_layout(const config::RunConfig& config, const Layout& layout);

// OK when the trainer accepts `layout` for `config` on `world_size` ranks: the world-size
// checks, the pipeline checks and the tensor-parallel model rule, exactly as ms-train runs them.
Status check_layout(const config::RunConfig& config, const Layout& layout, int world_size);

// The --set flags that select `layout` ("--set parallel.tp=2 ..."), every parallel key the
// layout decides, so they run the layout whatever the config file says.
std::vector<std::string> set_flags(const Layout& layout);

// "dp2 tp2 pp1 ..." for tables.
std::string layout_name(const Layout& layout);

}  // namespace ms::plan
