// Running a subcommand's body in the MPI world (under mpirun, or as a singleton when started
// alone): MPI is initialized from the tool's argv, the body gets the world communicator, and
// MPI is finalized whatever the body returned. Before MPI starts the heap is set to keep freed
// memory mapped (core/heap_policy.h).
//
// Failures (docs/comm.md, "Failure agreement"): under mpirun the body's outcome, an error it
// returned or an exception it threw, goes through comm::agree_job_end on a communicator of its
// own. When every rank arrives there, the failing ranks' errors are printed once here (by the
// lowest failing rank, and by any other whose message differs) and every rank exits 1. When a
// rank failed while its peers wait in a collective it skipped, it prints its error and aborts
// the job after a grace period of a few seconds. Alone, the body's outcome is returned as is
// (the tool prints it).
//
// Test hook: MS_TEST_FAIL_RANK=<rank>:<stage> makes world rank <rank> fail on purpose, for the
// failure tests in tests/e2e/: stage "start" returns an error before the body runs (its peers
// then wait in the body's first collective), "throw" throws std::bad_alloc there, "end" runs
// the body and then returns an error. Nothing else reads it.
#pragma once

#include <functional>

#include "comm/mpi_communicator.h"
#include "core/status.h"

namespace ms::cli {

Result<int> run_in_world(const std::function<Result<int>(comm::MpiCommunicator& world)>& body);

}  // namespace ms::cli
