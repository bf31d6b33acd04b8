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
  // Layers of each virtual stage (parallel.pp_layers); empty: the even split. An uneven split is
  // how a model whose layers pp x vpp does not divide runs pipelined (5 layers at pp 2: [3, 2]).
  std::vector<int64_t> pp_layers = {};
  bool operator==(const Layout&) const = default;

  int64_t micro_batches(int64_t global_batch) const { return global_batch / (dp * micro_batch); }
};

// The layout `config` describes on `world_size` ranks (dp from the world, the rest from
// parallel.* and train.micro_batch). The trainer's errors when it does not run.
Result<Layout> layout_of(const config::RunConfig& config, int world_size);

// `config` with `layout` applied (parallel.* with the layout's pp_layers, and train.micro_batch;
// no loader ranks, which context parallelism refuses).
config::RunConfig apply_layout(const config::RunConfig& config, const Layout& layout);

// OK when the trainer accepts `layout` for `config` on `world_size` ranks: the world-size
// checks, the pipeline checks and the tensor-parallel model rule, exactly as ms-train runs them.
Status check_layout(const config::RunConfig& config, const Layout& layout, int world_size);

// The --set flags that select `layout` ("--set parallel.tp=2 ..."), every parallel key the
// layout decides, so they run the layout whatever the config file says.
std::vector<std::string> set_flags(const Layout& layout);

// The layer splits the search plans for a pipeline of `pp` x `vpp` stages over `n_layers`: the
// even split where the stages divide the layers; otherwise the near-even ones (each stage
// floor or ceil of n_layers / stages), the larger stages first and, since the last stage also
// runs the output layer and the loss, the larger stages last. Empty when the stages outnumber
// the layers.
std::vector<std::vector<int64_t>> planned_pp_splits(int64_t n_layers, int pp, int vpp);

// "dp2 tp2 pp1 ..." for tables (an uneven split as "split3+2").
std::string layout_name(const Layout& layout);

}  // namespace ms::plan
