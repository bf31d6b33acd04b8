// The parallel layout of a run as text, for `ms-train --dry-run`: the Mesh (which world rank is
// which dp and tp coordinate, which are loader ranks), the switches that shape the work
// (sequence parallelism, recomputation, ZeRO-1), every parameter with its tensor-parallel
// split and the slice each tp rank holds, and what one model rank holds in memory. Pure: it
// needs no MPI and allocates no model.
#pragma once

#include <cstdint>
#include <string>

#include "config/run_config.h"
#include "core/status.h"

namespace ms::train {

// What one model rank holds for its `local_elements` fp32 parameter elements: weights,
// gradients, and optimizer state (two moments; under ZeRO-1 those and the master copy of the
// rank's shard, divided over dp), in MiB. The trainer's start-up line and the dry run use it.
struct RankMemoryPlan {
  double weights_mib = 0, gradients_mib = 0, optimizer_mib = 0;
};
RankMemoryPlan rank_memory_plan(int64_t local_elements, int dp, bool zero);

// The layout `config` runs with on `world_size` ranks. The errors of data_parallel_size and of
// the model's layout rule (parallel/tp_layout.h), naming the key.
Result<std::string> describe_layout(const config::RunConfig& config, int world_size);

}  // namespace ms::train
