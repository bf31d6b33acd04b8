// Communication time from the bus-bandwidth model of nccl-tests (its PERFORMANCE.md): a
// collective moving b bytes per rank over n ranks has algorithm bandwidth b / t and bus
// bandwidth algbw * factor(n), where the bus bandwidth is what a link sustains independent of
// n. So t = b * factor(n) / busbw, plus a latency per ring step.
#pragma once

#include <cstdint>

#include "plan/cluster.h"

namespace ms::plan {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kP2P };

// allreduce 2(n-1)/n; allgather, reduce-scatter and alltoall (n-1)/n; p2p 1; 0 for n = 1
// (nothing leaves the rank).
double bus_factor(Collective op, int n);

// Ring steps a collective takes, each paying the link latency: allreduce 2(n-1), allgather,
// reduce-scatter and alltoall n-1, p2p 1.
int latency_steps(Collective op, int n);

// Seconds for `op` of `bytes` per rank (the full buffer: allreduce's input, allgather's output)
// over `n` ranks on `link`. 0 for n = 1.
double collective_seconds(const Link& link, Collective op, double bytes, int n);

}  // namespace ms::plan
