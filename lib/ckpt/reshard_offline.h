// Offline resharding (`ms-ckpt reshard`): rewrites a checkpoint so its shards are the boxes a
// target layout's ranks would save and load, e.g. after a run moves from dp=2 to tp=2,dp=4
// with ZeRO, to pp=2,tp=2 or to ep=4,dp=4, so each loading rank reads one contiguous box per
// tensor (the plan: reshard_plan.h).
// Values are not changed; only which file and box hold them. Streaming: each output box (at
// most max_shard_bytes) is read with read_region (crc-checked) and appended to its file, so
// memory holds one box at a time.
// Under mpirun the output files are divided among the processes, which read and write in
// parallel; rank 0 gathers the shard records and commits the step directory atomically.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/manifest.h"
#include "ckpt/reshard_plan.h"
#include "comm/communicator.h"
#include "core/status.h"
#include "io/env.h"

namespace ms::ckpt {

struct ReshardOptions {
  std::string output_dir;  // a checkpoints/ directory; step-XXXXXXXX and latest are written in it
  bool replace = false;    // an existing step-XXXXXXXX there may be replaced (--replace)
  ReshardTarget target;
  TpPlacement tp_placement;  // needed when target.tp > 1 (ms-ckpt passes parallel::tp_shard)
  // Needed when target.pipelined() (ms-ckpt passes parallel::pp_ranks_holding).
  PpPlacement pp_placement;
  // Needed when target.ep > 1 (ms-ckpt passes parallel::ep_rank_holding).
  EpPlacement ep_placement;
  uint64_t max_shard_bytes = 64ull << 20;
  std::function<void(uint64_t done, uint64_t total)> progress;  // this process's bytes
};

// Reshards the checkpoint at `step_dir` into options.output_dir (collective over `comm`).
// Returns the new step directory. Any rank's failure fails every rank, and nothing is committed.
// InvalidArgument when the output directory or step directory is, contains or is inside
// `step_dir`; AlreadyExists when the output step directory exists and is not empty, unless
// options.replace (io::StagedDirectory); plan_reshard's InvalidArgument (naming the tensor)
// before anything is created when the placement refuses a tensor.
Result<std::string> reshard_checkpoint(const std::string& step_dir, const ReshardOptions& options,
                                       comm::Communicator& comm, io::Env& env);

}  // namespace ms::ckpt
