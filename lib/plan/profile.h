// `ms-train plan --profile FILE`: measures this machine into a cluster file. Rank 0 times fp32
// GEMMs over a range of sizes (the efficiency curve), attention, and the STREAM triad (memory
// bandwidth) while the other ranks wait, so each figure is one device's alone; then one rank per
// core (the others sleeping) runs a GEMM-and-STREAM mix at once (concurrency_efficiency: rank 0's
// speed then against alone), and those ranks time a small ping-pong (latency) and large
// all-reduces (bus bandwidth) over MPI: the intra-node link. With more ranks than cores, every
// rank then times the links again at once: links.oversubscribed. With a run config, rank 0 also
// times every GEMM and attention shape the search would look up for that model on 1 to
// `plan_ranks` ranks, and the model's own layers at every micro-batch it would use
// (op_costs.h's layer_key), alone and with one rank per core at once, so predictions for it use
// measured times.
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
