// Replays the pipeline schedule the trainer runs (parallel::pp_schedule's action lists, the
// same lists the executor follows) with each rank's own op costs: what a closed-form bubble
// formula cannot see, such as the first stage's embedding, the last stage's output layer and
// loss, uneven layer splits and the time an activation spends on the wire. The replay itself is
// parallel::simulate_pp, the one home of pipeline replay; this supplies the plan's cost tables.
#pragma once

#include <vector>

#include "core/status.h"
#include "parallel/pp_schedule.h"

namespace ms::plan {

// Seconds of one micro-batch through one chunk: forward, the input-gradient pass and the
// weight-gradient pass (for 1f1b and interleaved a backward costs their sum).
struct ChunkTimes {
  double forward = 0, backward_input = 0, backward_weight = 0;
};

struct ReplayResult {
  double makespan = 0;       // the step's pipeline time
  double bubble = 0;         // mean over ranks of 1 - busy / makespan
  std::vector<double> busy;  // by pipeline rank
  double last_backward = 0;  // the final backward of rank 0 (what dp reduction may hide behind)
};

// `chunks[r][c]`: rank r's chunk c. `p2p_seconds`: the time from a send until its receive can
// complete (the wire). FailedPrecondition when the lists deadlock.
Result<ReplayResult> replay_pipeline(const parallel::PpScheduleShape& shape,
                                     const std::vector<std::vector<ChunkTimes>>& chunks,
                                     double p2p_seconds);

}  // namespace ms::plan
