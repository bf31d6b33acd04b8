#include "rl/rollout_weights.h"

#include <algorithm>
#include <string>

#include "core/timer.h"
#include "parallel/tp_shards.h"

namespace ms::rl {

Result<ReshardReport> gather_tp_weights(comm::Communicator& tp,
                                        const std::vector<model::Parameter>& sharded,
                                        std::vector<model::Parameter>& whole) {
  if (sharded.size() != whole.size()) {
    return InvalidArgument("the rollout model has " + std::to_string(whole.size()) +
                           " parameters, the actor " + std::to_string(sharded.size()));
  }
  for (size_t i = 0; i < sharded.size(); ++i) {
    if (sharded[i].name != whole[i].name || sharded[i].global_shape != whole[i].global_shape ||
        !whole[i].shard.is_replicated()) {
      return InvalidArgument("rollout model parameter " + whole[i].name +
                             " does not match the actor's " + sharded[i].name +
                             " (name, global shape, or not whole)");
    }
  }
  Stopwatch clock;
  ReshardReport report;
  std::vector<float> received;
  for (size_t i = 0; i < sharded.size(); ++i) {
    const model::Parameter& from = sharded[i];
    float* to = whole[i].value.data<float>();
    if (from.shard.is_replicated()) {
      std::copy_n(from.value.data<float>(), from.value.numel(), to);
      continue;
    }
    // Every rank's slice by the one rule; this rank's must be the one it holds.
    std::vector<comm::ShardSpec> specs;
    std::vector<size_t> counts;
    for (int r = 0; r < tp.size(); ++r) {
      MS_ASSIGN_OR_RETURN(comm::ShardSpec spec,
                          parallel::tp_shard(from.name, from.global_shape, tp.size(), r));
      counts.push_back(static_cast<size_t>(spec.numel()));
      specs.push_back(std::move(spec));
    }
    if (!(specs[static_cast<size_t>(tp.rank())] == from.shard)) {
      return Internal("actor parameter " + from.name + " holds " + from.shard.to_string() +
                      ", not its tp slice " + specs[static_cast<size_t>(tp.rank())].to_string());
    }
    size_t total = 0;
    for (size_t c : counts) total += c;
    received.resize(total);
    MS_RETURN_IF_ERROR(tp.allgatherv(from.value.data<float>(), counts[tp.rank()],
                                     received.data(), counts, DType::kF32));
    const comm::ShardSpec all = comm::ShardSpec::replicated(from.global_shape);
    size_t offset = 0;
    for (int r = 0; r < tp.size(); ++r) {
      MS_ASSIGN_OR_RETURN(const std::vector<comm::OverlapRun> runs,
                          comm::overlap_runs(specs[static_cast<size_t>(r)], all));
      for (const comm::OverlapRun& run : runs) {
        std::copy_n(received.data() + offset + run.a_offset, run.length, to + run.b_offset);
      }
      if (r != tp.rank()) report.bytes_received += counts[static_cast<size_t>(r)] * sizeof(float);
      offset += counts[static_cast<size_t>(r)];
    }
  }
  report.seconds = clock.elapsed_s();
  return report;
}

}  // namespace ms::rl
