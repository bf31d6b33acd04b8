// See mpi_world.h.
#include "cmd/common/mpi_world.h"

#include <cstdlib>
#include <memory>
#include <new>
#include <string>

#include "cmd/common/tool.h"
#include "comm/agree.h"
#include "core/heap_policy.h"

namespace ms::cli {
namespace {

// How long a failed rank waits for its peers at the end of the job before aborting it: long
// enough for ranks that fail alike at about the same time to end together (one message, no
// abort), short enough that "every rank exits within seconds" holds.
constexpr double kFailureGraceS = 3.0;

// The stage MS_TEST_FAIL_RANK names for this rank ("start", "throw", "end"), or "".
std::string injected_stage(int rank) {
  const char* value = std::getenv("MS_TEST_FAIL_RANK");
  if (value == nullptr) return "";
  const std::string text(value);
  const size_t colon = text.find(':');
  if (colon == std::string::npos || text.substr(0, colon) != std::to_string(rank)) return "";
  return text.substr(colon + 1);
}

Status injected_failure(int rank, const std::string& stage) {
  return Internal("failure injected by MS_TEST_FAIL_RANK on rank " + std::to_string(rank) +
                  " at stage '" + stage + "'");
}

// The body's outcome, with thrown exceptions turned into errors and the test hook applied.
Result<int> run_body(const std::function<Result<int>(comm::MpiCommunicator&)>& body,
                     comm::MpiCommunicator& world) {
  const std::string stage = injected_stage(world.rank());
  try {
    if (stage == "start") return injected_failure(world.rank(), stage);
    if (stage == "throw") throw std::bad_alloc();
    Result<int> outcome = body(world);
    if (stage == "end" && outcome.ok()) return injected_failure(world.rank(), stage);
    return outcome;
  } catch (const std::exception& e) {
    return unexpected_exception(e);
  }
}

// Under mpirun: the job-end agreement, printing where it says to, and exit status 1 on every
// rank when any failed. An error that only some ranks had is printed with its rank.
Result<int> end_job(comm::MpiCommunicator& group, const Result<int>& outcome) {
  if (group.size() == 1) return outcome;
  const Status local = outcome.ok() ? Status::OK() : outcome.status();
  const std::string rank = "rank " + std::to_string(group.rank());
  MS_ASSIGN_OR_RETURN(const comm::JobEnd end,
                      comm::agree_job_end(group, local, kFailureGraceS, [&] {
                        Tool::print_running_error(
                            rank + ": " + local.message() +
                            " (the other ranks did not reach the end; aborting the job)");
                      }));
  if (end.report_here) {
    Tool::print_running_error(end.failed_ranks < group.size() ? rank + ": " + local.message()
                                                              : local.message());
  }
  if (end.failed_ranks > 0) return 1;
  return outcome;
}

}  // namespace

Result<int> run_in_world(const std::function<Result<int>(comm::MpiCommunicator& world)>& body) {
  // MPI's per-message buffers must not be faulted in anew on every collective (heap_policy.h).
  MS_RETURN_IF_ERROR(keep_freed_memory_mapped());
  MS_RETURN_IF_ERROR(comm::init(Tool::argc(), Tool::argv()));
  Result<int> outcome = [&]() -> Result<int> {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<comm::MpiCommunicator> world,
                        comm::MpiCommunicator::world());
    // Its own communicator, so the job-end agreement never meets a collective of the body.
    MS_ASSIGN_OR_RETURN(std::unique_ptr<comm::MpiCommunicator> job_end,
                        world->split_mpi(0, world->rank(), "job-end"));
    const Result<int> body_outcome = run_body(body, *world);
    return end_job(*job_end, body_outcome);
  }();
  const Status finalized = comm::finalize();
  if (outcome.ok() && !finalized.ok()) return finalized;
  return outcome;
}

}  // namespace ms::cli
