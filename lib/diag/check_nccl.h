// check's collective sweep over NCCL on GPU buffers (`ms-diagnose check --nccl`), one rank per
// GPU under mpirun or srun: the same collectives, sizes, exact inputs, timing and verification
// as the MPI sweep (diag/check.h), so the tables read the same and nccl-tests' busbw applies.
// The NCCL group is bootstrapped over MPI (comm/nccl_communicator.h); passes are timed with the
// MPI world's allreduce of each rank's mean and results are verified on the host.
//
// Where NCCL's forms differ from MPI's: in-place reduce-scatter leaves each rank's block at
// its own offset of the buffer (NCCL's definition); in-place alltoall is not run (its grouped
// sends and receives would overwrite data still to be sent; printed N/A); sendrecv is one
// grouped send to rank+1 and receive from rank-1.
#pragma once

#include <vector>

#include "comm/mpi_communicator.h"
#include "core/status.h"
#include "diag/check.h"

namespace ms::diag {

// False for the collectives NCCL does not run in place here (alltoall, sendrecv).
bool has_nccl_in_place(Collective c);

// Collective over `world`: the sweep of options.collectives over options' sizes, one row list
// per collective. kUnavailable naming why, on every rank alike, when the build has no NCCL or a
// rank has no usable GPU; callers print it as a skip line.
Result<std::vector<std::vector<CollectiveResult>>> run_nccl_collectives(
    comm::MpiCommunicator& world, const CheckOptions& options);

}  // namespace ms::diag
