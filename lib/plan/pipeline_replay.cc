// Pipeline replay with measured costs: the trainer's action lists run through the one replay,
// parallel::simulate_pp; see pipeline_replay.h.
#include "plan/pipeline_replay.h"

#include <string>
#include <utility>

namespace ms::plan {

Result<ReplayResult> replay_pipeline(const parallel::PpScheduleShape& shape,
                                     const std::vector<std::vector<ChunkTimes>>& chunks,
                                     double p2p_seconds) {
  MS_RETURN_IF_ERROR(parallel::check_pp_schedule(shape));
  const int pp = shape.pp;
  if (chunks.size() != static_cast<size_t>(pp)) {
    return InvalidArgument("replay_pipeline: costs for " + std::to_string(chunks.size()) +
                           " ranks, pipeline has " + std::to_string(pp));
  }
  std::vector<std::vector<parallel::PpAction>> lists(static_cast<size_t>(pp));
  std::vector<std::vector<parallel::PpCosts>> costs(static_cast<size_t>(pp));
  for (int r = 0; r < pp; ++r) {
    MS_ASSIGN_OR_RETURN(lists[static_cast<size_t>(r)], parallel::pp_schedule(shape, r));
    for (const ChunkTimes& t : chunks[static_cast<size_t>(r)]) {
      costs[static_cast<size_t>(r)].push_back({t.forward, t.backward_input, t.backward_weight});
    }
  }
  Result<parallel::PpSimulation> sim = parallel::simulate_pp(shape, lists, costs, p2p_seconds);
  if (!sim.ok()) return sim.status().with_context("replay_pipeline");
  ReplayResult out;
  out.makespan = sim->makespan;
  out.bubble = sim->bubble;
  out.busy = std::move(sim->busy);
  out.last_backward = sim->last_backward[0];
  return out;
}

}  // namespace ms::plan
