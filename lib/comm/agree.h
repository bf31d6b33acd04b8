// The one failure agreement of the toolkit (docs/comm.md, "Failure agreement"). Under mpirun a
// step that can fail on some ranks only (open a file, load a model, allocate) is followed by
// agree(): every rank learns whether any failed, so either all go on into the next collective
// or all return the same error, which carries the failing rank's own message. The end of a job
// is agreed by agree_job_end(), which also ends a job whose failing rank left its peers waiting
// in a collective it will never join.
#pragma once

#include <functional>
#include <string_view>

#include "comm/communicator.h"
#include "core/status.h"

namespace ms::comm {

// Collective over `group`. OK on every member when `local` is OK on every member; that costs
// one allreduce of one integer. Otherwise every member returns the same Status: the code of
// the lowest failing rank and "<what> failed on rank W: <its message>", W its world rank, with
// " (and on K other ranks)" when more failed. A group of one returns `local` unchanged. Pass
// this rank's own outcome, not one that an earlier agree() already shared.
Status agree(Communicator& group, const Status& local, std::string_view what);

// How the job ended, as agree_job_end() found it.
struct JobEnd {
  int failed_ranks = 0;      // ranks whose outcome was an error
  bool report_here = false;  // this rank prints its error: it is the lowest failing rank, or
                             // failed with a message other than that rank's
};

// The last agreement of a job, collective over `group`: a communicator used for nothing else,
// so it never meets a collective another rank is blocked in. A rank whose outcome is OK waits
// for every peer. A rank whose outcome failed waits at most `grace_s` seconds; when some peer
// has not arrived by then (it is blocked in a collective this rank skipped, or still working),
// it calls `on_abandoned` (to print its error) and ends the whole job with MPI_Abort, exit
// status 1, without returning.
Result<JobEnd> agree_job_end(Communicator& group, const Status& local, double grace_s,
                             const std::function<void()>& on_abandoned);

}  // namespace ms::comm
