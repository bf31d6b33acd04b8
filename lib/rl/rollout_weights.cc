#include "rl/rollout_weights.h"

#include <algorithm>
#include <string>

#include "core/timer.h"
#include "parallel/tp_shards.h"

namespace ms::rl {

Result<ReshardReport> gather_whole_weights(comm::Communicator& group, int holders,
                                           const std::vector<model::Parameter>* sharded,
                                           std::vector<model::Parameter>* whole) {
  const bool holder = group.rank() < holders;
  if (holders < 1 || holders > group.size() || holder != (sharded != nullptr)) {
    return InvalidArgument("weight gather: members 0.." + std::to_string(holders - 1) +
                           " of " + std::to_string(group.size()) + " hold the slices; member " +
                           std::to_string(group.rank()) + (sharded ? " passed" : " did not pass") +
                           " any");
  }
  if (sharded && whole) {
    if (sharded->size() != whole->size()) {
      return InvalidArgument("the rollout model has " + std::to_string(whole->size()) +
                             " parameters, the actor " + std::to_string(sharded->size()));
    }
    for (size_t i = 0; i < sharded->size(); ++i) {
      const model::Parameter &from = (*sharded)[i], &to = (*whole)[i];
      if (from.name != to.name || from.global_shape != to.global_shape) {
        return InvalidArgument("rollout model parameter " + to.name +
                               " does not match the actor's " + from.name);
      }
    }
  }
  if (whole) {
    for (const model::Parameter& p : *whole) {
      if (!p.shard.is_replicated()) {
        return InvalidArgument("rollout model parameter " + p.name + " is not whole");
      }
    }
  }
  const std::vector<model::Parameter>& table = sharded ? *sharded : *whole;
  const bool everyone_holds = holders == group.size();
  Stopwatch clock;
  ReshardReport report;
  std::vector<float> received;
  for (size_t i = 0; i < table.size(); ++i) {
    const std::string& name = table[i].name;
    const std::vector<int64_t>& shape = table[i].global_shape;
    float* to = whole ? (*whole)[i].value.data<float>() : nullptr;
    const model::Parameter* from = sharded ? &(*sharded)[i] : nullptr;
    // Who sends what: each holder its tp slice, or member 0 a replicated tensor whole.
    MS_ASSIGN_OR_RETURN(const comm::ShardSpec mine_spec, parallel::tp_shard(name, shape, holders, 0));
    const bool replicated = mine_spec.is_replicated();
    if (replicated && everyone_holds) {
      if (to) std::copy_n(from->value.data<float>(), from->value.numel(), to);
      continue;
    }
    std::vector<comm::ShardSpec> specs;
    std::vector<size_t> counts;
    for (int r = 0; r < group.size(); ++r) {
      if (r >= holders || (replicated && r > 0)) {
        specs.push_back(comm::ShardSpec::replicated(shape));  // unused: sends nothing
        counts.push_back(0);
        continue;
      }
      MS_ASSIGN_OR_RETURN(comm::ShardSpec spec, parallel::tp_shard(name, shape, holders, r));
      counts.push_back(static_cast<size_t>(spec.numel()));
      specs.push_back(std::move(spec));
    }
    const size_t me = static_cast<size_t>(group.rank());
    if (from && counts[me] > 0 && !(specs[me] == from->shard)) {
      return Internal("actor parameter " + name + " holds " + from->shard.to_string() +
                      ", not its tp slice " + specs[me].to_string());
    }
    size_t total = 0;
    for (size_t c : counts) total += c;
    received.resize(total);
    MS_RETURN_IF_ERROR(group.allgatherv(from ? from->value.data<float>() : nullptr, counts[me],
                                        received.data(), counts, DType::kF32));
    const comm::ShardSpec all = comm::ShardSpec::replicated(shape);
    size_t offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] == 0) continue;
      if (to) {
        MS_ASSIGN_OR_RETURN(const std::vector<comm::OverlapRun> runs,
                            comm::overlap_runs(specs[r], all));
        for (const comm::OverlapRun& run : runs) {
          std::copy_n(received.data() + offset + run.a_offset, run.length, to + run.b_offset);
        }
      }
      if (r != me) report.bytes_received += counts[r] * sizeof(float);
      offset += counts[r];
    }
  }
  report.seconds = clock.elapsed_s();
  return report;
}

}  // namespace ms::rl
