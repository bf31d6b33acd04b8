// `ms-train plan --profile`: how much of the data-parallel gradient reduction the backward hides
// on this machine, measured rather than assumed. The trainer issues its gradient buckets as
// nonblocking collectives while the backward still runs and tests them between compute chunks
// (train/distributed_optimizer.h: OpenMPI moves a nonblocking collective only inside MPI calls),
// then waits for the rest. The probe does the same on every rank of a group at once: GEMM chunks
// (about as long as the reduction alone), the buckets issued after successive quarters of them
// and tested between chunks, then the final wait. Exposed = that time less the chunks alone;
// hidden share = 1 - exposed / the reduction alone. On an oversubscribed CPU it can be below 0:
// the overlap then costs more than the reduction would after the backward.
#pragma once

#include "comm/communicator.h"
#include "core/status.h"

namespace ms::plan {

// Collective over `group`; every rank returns rank 0's hidden share, in [-1, 1].
Result<double> measure_dp_hidden_share(comm::Communicator& group);

}  // namespace ms::plan
