// `ms-train plan --profile`: what the data-parallel gradient reduction adds to a step on this
// machine, measured rather than assumed hidden. The trainer issues its gradient buckets as
// nonblocking collectives while the backward still runs and tests them once per layer
// (train/distributed_optimizer.h: OpenMPI moves a nonblocking collective only inside MPI calls,
// and on a CPU with the same cores it copies the bytes there too), then waits for the rest. The
// probe does the same on every rank of a group at once: a backward of 16 layer-long compute
// chunks (about 10 ms each), 4 buckets of 4 MiB issued after successive quarters and tested
// after every chunk, then the final wait; for the reduce-scatter of ZeRO-1 and the all-reduce of
// plain dp. Cost = that time less the chunks alone, per MiB of gradients (lower quartiles of 3
// rounds, rank 0's), so it holds the wait after the backward and the backward's slowdown alike.
#pragma once

#include "comm/communicator.h"
#include "core/status.h"
#include "plan/cluster.h"

namespace ms::plan {

// Collective over `group`; every rank returns rank 0's measurement.
Result<DpReductionCost> measure_dp_reduction_cost(comm::Communicator& group);

}  // namespace ms::plan
