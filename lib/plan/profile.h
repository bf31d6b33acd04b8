// `ms-train plan --profile FILE`: measures this machine into a cluster file. Rank 0 times fp32
// GEMMs over a range of sizes (the efficiency curve), attention, and the STREAM triad (memory
// bandwidth) while the other ranks wait, so each figure is one device's alone; then every rank
// runs a GEMM-and-STREAM mix at once (concurrency_efficiency: rank 0's speed then against alone),
// and ranks 0 and 1 time a small ping-pong (latency) and large all-reduces (bus bandwidth) over
// MPI. With a run config, rank 0 also times every GEMM and attention shape the search would look up
// for that model on 1 to `plan_ranks` ranks, so predictions for it use measured op times.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "config/run_config.h"
#include "core/status.h"
#include "plan/cluster.h"

namespace ms::plan {

struct ProfileOptions {
  std::string name = "cpu";
  const config::RunConfig* config = nullptr;  // measure its shapes too
  int plan_ranks = 0;                         // the largest world its shapes are collected for
  double min_seconds_per_op = 0.1;
};

// Collective over `world` (at least 2 ranks: the links need a peer). The cluster: ranks and
// ranks_per_node = world size (one node), devices_per_node = the node's online cores,
// memory_per_rank_gib = the node's memory / ranks, runtime_overhead_mib = rank 0's resident
// memory after profiling (MPI, BLAS and the binary, with every profiling buffer freed).
Result<Cluster> measure_cluster(comm::Communicator& world, const ProfileOptions& options);

}  // namespace ms::plan
