// Offline resharding (`ms-ckpt reshard`): rewrites a checkpoint so its shards are the boxes a
// target layout's ranks would save and load, e.g. after a run moves from dp=2 to dp=8 with
// ZeRO, so each loading rank reads one contiguous box per tensor. Values are not changed; only
// which file and box hold them. Streaming: each output box (at most max_shard_bytes) is read
// with read_region (crc-checked) and appended to its file, so memory holds one box at a time.
// Under mpirun the output files are divided among the processes, which read and write in
// parallel; rank 0 gathers the shard records and commits the step directory atomically.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/manifest.h"
#include "ckpt/regions.h"
#include "comm/communicator.h"
#include "core/status.h"
#include "io/env.h"

namespace ms::ckpt {

struct ReshardTarget {
  int dp = 1;
  int zero = 0;  // 1: optimizer state ("optimizer.*") is split into flat ranges across dp
};

// "dp=4,zero=1" -> target. tp, pp and ep other than 1 are refused (the model does not split
// tensors that way yet); unknown keys and bad numbers are InvalidArgument naming them.
Result<ReshardTarget> parse_reshard_target(std::string_view text);

// One output shard: box `box` of tensor `tensor` (index into Manifest::tensors), written by
// target rank `target_rank` into its data file.
struct PlannedShard {
  size_t tensor = 0;
  int target_rank = 0;
  Box box;
};

// The shards the target layout saves: a replicated tensor once, by the target rank with the
// fewest bytes so far (so writes are balanced); optimizer state under zero=1 as each dp rank's
// flat range decomposed into boxes. Boxes are split to at most max_shard_bytes where a row
// allows. Deterministic.
std::vector<PlannedShard> plan_reshard(const Manifest& m, const ReshardTarget& target,
                                       uint64_t max_shard_bytes);

struct ReshardOptions {
  std::string output_dir;  // a checkpoints/ directory; step-XXXXXXXX and latest are written in it
  ReshardTarget target;
  uint64_t max_shard_bytes = 64ull << 20;
  std::function<void(uint64_t done, uint64_t total)> progress;  // this process's bytes
};

// Reshards the checkpoint at `step_dir` into options.output_dir (collective over `comm`).
// Returns the new step directory. Any rank's failure fails every rank, and nothing is committed.
// AlreadyExists when the output step directory exists.
Result<std::string> reshard_checkpoint(const std::string& step_dir, const ReshardOptions& options,
                                       comm::Communicator& comm, io::Env& env);

}  // namespace ms::ckpt
