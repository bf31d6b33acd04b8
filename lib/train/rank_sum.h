// Sums of doubles across ranks that do not depend on MPI's reduction algorithm: every rank
// all-gathers the others' values and adds them in rank order itself, so all ranks get the same
// bits, run after run and for any MPI build. Used for losses, gradient norms and LAMB's
// per-parameter norms, which are few values (the communicator offers no f64 reduction anyway).
#pragma once

#include <span>

#include "comm/communicator.h"
#include "core/status.h"

namespace ms::train {

// Replaces each values[i] with the sum over all ranks of `comm` of their values[i], added in
// rank order. Collective; every rank passes the same count. Returns the communicator's error.
Status sum_in_rank_order(comm::Communicator& comm, std::span<double> values);

}  // namespace ms::train
