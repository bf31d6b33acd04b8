// See agree.h. Both agreements move host buffers, so `group` is an MPI communicator (or another
// host transport); the NCCL backend bootstraps over MPI and agrees there.
#include "comm/agree.h"

#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>

#include "core/timer.h"

namespace ms::comm {
namespace {

// The lowest rank of `group` whose outcome failed, or group.size() when none did.
Result<int> lowest_failing_rank(Communicator& group, bool failed) {
  const int32_t mine = failed ? group.rank() : group.size();
  int32_t lowest = 0;
  MS_RETURN_IF_ERROR(group.allreduce(&mine, &lowest, 1, DType::kI32, ReduceOp::kMin));
  return lowest;
}

Result<int> count_failed(Communicator& group, bool failed) {
  const int32_t mine = failed ? 1 : 0;
  int32_t total = 0;
  MS_RETURN_IF_ERROR(group.allreduce(&mine, &total, 1, DType::kI32, ReduceOp::kSum));
  return total;
}

// The Status of `root` (an error) on every member of `group`, into `shared`; the return value
// is the transport's.
Status share_status(Communicator& group, const Status& local, int root, Status& shared) {
  const bool is_root = group.rank() == root;
  int64_t header[2] = {static_cast<int64_t>(local.code()),
                       static_cast<int64_t>(local.message().size())};
  MS_RETURN_IF_ERROR(group.broadcast(header, 2, DType::kI64, root));
  std::string message = is_root ? local.message() : std::string(static_cast<size_t>(header[1]), '\0');
  MS_RETURN_IF_ERROR(group.broadcast(message.data(), message.size(), DType::kU8, root));
  shared = Status(static_cast<StatusCode>(header[0]), std::move(message));
  return Status::OK();
}

[[noreturn]] void abandon_job(const std::function<void()>& on_abandoned) {
  if (on_abandoned) on_abandoned();
  // mpirun forwards each rank's stderr through its node daemon; a moment's pause lets the
  // message leave before the abort kills the daemon's processes.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

// Polls `request` until it completes, or abandons the job after `limit_s` seconds. Polling
// (rather than a blocking wait) is what lets a failed rank stop waiting.
Status wait_or_abandon(Request& request, double limit_s,
                       const std::function<void()>& on_abandoned) {
  Stopwatch clock;
  for (;;) {
    MS_ASSIGN_OR_RETURN(const bool done, request.test());
    if (done) return Status::OK();
    if (clock.elapsed_s() > limit_s) abandon_job(on_abandoned);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

Status agree(Communicator& group, const Status& local, std::string_view what) {
  if (group.size() == 1) return local;
  MS_ASSIGN_OR_RETURN(const int lowest, lowest_failing_rank(group, !local.ok()));
  if (lowest == group.size()) return Status::OK();
  MS_ASSIGN_OR_RETURN(const int failed, count_failed(group, !local.ok()));
  Status first;
  MS_RETURN_IF_ERROR(share_status(group, local, lowest, first));
  std::string message = std::string(what) + " failed on rank " +
                        std::to_string(group.world_ranks()[static_cast<size_t>(lowest)]) + ": " +
                        first.message();
  if (failed > 1) {
    message += " (and on " + std::to_string(failed - 1) +
               (failed == 2 ? " other rank)" : " other ranks)");
  }
  return Status(first.code(), std::move(message));
}

Result<JobEnd> agree_job_end(Communicator& group, const Status& local, double grace_s,
                             const std::function<void()>& on_abandoned) {
  JobEnd end;
  if (group.size() == 1) {
    end.failed_ranks = local.ok() ? 0 : 1;
    end.report_here = !local.ok();
    return end;
  }
  const int32_t mine = local.ok() ? group.size() : group.rank();
  int32_t lowest = 0;
  MS_ASSIGN_OR_RETURN(Request request,
                      group.iallreduce(&mine, &lowest, 1, DType::kI32, ReduceOp::kMin));
  const double limit_s = local.ok() ? std::numeric_limits<double>::infinity() : grace_s;
  MS_RETURN_IF_ERROR(wait_or_abandon(request, limit_s, on_abandoned));
  if (lowest == group.size()) return end;
  MS_ASSIGN_OR_RETURN(end.failed_ranks, count_failed(group, !local.ok()));
  Status first;
  MS_RETURN_IF_ERROR(share_status(group, local, lowest, first));
  end.report_here =
      !local.ok() && (group.rank() == lowest || local.message() != first.message());
  return end;
}

}  // namespace ms::comm
