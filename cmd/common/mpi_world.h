// Running a subcommand's body in the MPI world (under mpirun, or as a singleton when started
// alone): MPI is initialized from the tool's argv, the body gets the world communicator, and
// MPI is finalized whatever the body returned. The body's error wins over finalize's.
#pragma once

#include <functional>
#include <memory>

#include "cmd/common/tool.h"
#include "comm/mpi_communicator.h"
#include "core/status.h"

namespace ms::cli {

inline Result<int> run_in_world(
    const std::function<Result<int>(comm::MpiCommunicator& world)>& body) {
  MS_RETURN_IF_ERROR(comm::init(Tool::argc(), Tool::argv()));
  Result<int> outcome = [&]() -> Result<int> {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<comm::MpiCommunicator> world,
                        comm::MpiCommunicator::world());
    return body(*world);
  }();
  const Status finalized = comm::finalize();
  if (outcome.ok() && !finalized.ok()) return finalized;
  return outcome;
}

}  // namespace ms::cli
