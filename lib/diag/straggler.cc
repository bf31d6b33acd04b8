// What-if replays of a trace and the attribution of its waste; see straggler.h.
#include "diag/straggler.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "diag/robust_stats.h"

namespace ms::diag {
namespace {

using Select = std::function<bool(const ReplayOp&)>;

// Ops that are interchangeable across ranks: compute by (op, stage), communication by
// (op, group kind, bytes).
std::string ideal_group(const ReplayOp& op) {
  if (!op.is_comm) return "compute|" + op.op + "|" + std::to_string(op.stage);
  return "comm|" + op.op + "|" + group_kind(op.group) + "|" + std::to_string(op.bytes);
}

// Gaps are host time between ops (launches, data, framework), which does not depend on which
// layers an op runs: compute gaps are grouped by op alone, across stages, so a stage whose host
// stalls before its ops stands out even on a single pipeline, where each stage is alone in its
// duration group. Transfers keep their group.
std::string gap_group(const ReplayOp& op) {
  return op.is_comm ? ideal_group(op) : "compute|" + op.op;
}

struct IdealDurations {
  std::map<std::string, double> duration, gap;
};

IdealDurations ideal_durations(const ReplayProgram& program) {
  std::map<std::string, std::vector<double>> durations, gaps;
  for (const auto& ops : program) {
    for (const ReplayOp& op : ops) {
      durations[ideal_group(op)].push_back(op.duration_s);
      gaps[gap_group(op)].push_back(op.gap_s);
    }
  }
  IdealDurations ideal;
  for (const auto& [group, values] : durations) {
    const bool compute = group.rfind("compute|", 0) == 0;
    ideal.duration[group] = compute ? std::accumulate(values.begin(), values.end(), 0.0) /
                                          static_cast<double>(values.size())
                                    : median(values);
  }
  for (const auto& [group, values] : gaps) ideal.gap[group] = median(values);
  return ideal;
}

// `program` with ideal gaps for the selected ops and ideal durations for the selected compute
// ops and for every collective that has a selected participant.
ReplayProgram idealized(const ReplayProgram& program, const IdealDurations& ideal,
                        const Select& select) {
  std::set<std::string> collectives;
  for (const auto& ops : program) {
    for (const ReplayOp& op : ops) {
      if (op.is_comm && select(op)) collectives.insert(comm_key(op));
    }
  }
  ReplayProgram out = program;
  for (auto& ops : out) {
    for (ReplayOp& op : ops) {
      const std::string group = ideal_group(op);
      if (select(op)) op.gap_s = ideal.gap.at(gap_group(op));
      const bool fix = op.is_comm ? collectives.count(comm_key(op)) > 0 : select(op);
      if (fix) op.duration_s = ideal.duration.at(group);
    }
  }
  return out;
}

// Duration of each step (in `steps` order): from the end of the previous step's last op (or the
// replay's beginning) to the end of its own last op.
std::vector<double> step_durations(const ReplayProgram& program, const ReplayTimes& times,
                                   const std::vector<int64_t>& steps) {
  std::map<int64_t, double> finish;
  for (size_t r = 0; r < program.size(); ++r) {
    for (size_t i = 0; i < program[r].size(); ++i) {
      double& f = finish.try_emplace(program[r][i].step, times.t_begin).first->second;
      f = std::max(f, times.end[r][i]);
    }
  }
  std::vector<double> out;
  double previous = times.t_begin;
  for (int64_t s : steps) {
    out.push_back(finish[s] - previous);
    previous = finish[s];
  }
  return out;
}

struct Subsets {
  std::vector<int64_t> steps;
  std::set<int> stages;
  std::set<std::string> ops;
};

Subsets subsets_of(const ReplayProgram& program) {
  Subsets s;
  std::set<int64_t> steps;
  for (const auto& ops : program) {
    for (const ReplayOp& op : ops) {
      steps.insert(op.step);
      if (op.stage >= 0) s.stages.insert(op.stage);
      s.ops.insert(op.op);
    }
  }
  s.steps.assign(steps.begin(), steps.end());
  return s;
}

// Every rank, stage and op type costs one full replay, and their counts come from the trace:
// refuse a trace whose what-if replays would run for minutes (a trace with thousands of
// distinct op names is corrupt or not a training step trace).
Status check_replay_work(size_t ranks, const Subsets& subsets, size_t events) {
  const size_t replays = ranks + subsets.stages.size() + subsets.ops.size() + 2;
  if (static_cast<double>(replays) * static_cast<double>(events) <= kMaxReplayWork) {
    return Status::OK();
  }
  return InvalidArgument(
      "the trace has " + std::to_string(events) + " events over " + std::to_string(ranks) +
      " ranks, " + std::to_string(subsets.stages.size()) + " stages and " +
      std::to_string(subsets.ops.size()) + " op types: " + std::to_string(replays) +
      " what-if replays of every event exceed the limit of " +
      std::to_string(static_cast<long long>(kMaxReplayWork)) +
      " replayed events; analyze fewer steps (or check the op and stage fields)");
}

}  // namespace

Result<StragglerReport> analyze_stragglers(
    const std::vector<std::vector<telemetry::TraceEvent>>& traces) {
  size_t events = 0;
  for (const auto& t : traces) events += t.size();
  if (events == 0) return InvalidArgument("the traces hold no events");
  MS_ASSIGN_OR_RETURN(ReplayProgram program, build_program(traces));
  const IdealDurations ideal = ideal_durations(program);
  const Subsets subsets = subsets_of(program);
  MS_RETURN_IF_ERROR(check_replay_work(program.size(), subsets, events));
  StragglerReport report;
  report.ranks = static_cast<int>(program.size());
  report.steps = subsets.steps;
  report.measured_s = measured_makespan(traces);
  report.pipeline = measure_pipeline_bubble(traces);
  MS_ASSIGN_OR_RETURN(ReplayTimes actual, replay(program, 0.0));
  MS_ASSIGN_OR_RETURN(ReplayTimes best, replay(idealized(program, ideal, [](const ReplayOp&) { return true; }), 0.0));
  report.actual_s = actual.makespan();
  report.ideal_s = best.makespan();
  report.slowdown = report.ideal_s > 0 ? report.actual_s / report.ideal_s : 1.0;
  report.waste_s = report.actual_s - report.ideal_s;
  const std::vector<double> actual_steps = step_durations(program, actual, subsets.steps);

  auto what_if = [&](const std::string& name, const Select& select) -> Result<std::pair<WhatIf, ReplayTimes>> {
    ReplayProgram fixed = idealized(program, ideal, select);
    MS_ASSIGN_OR_RETURN(ReplayTimes times, replay(fixed, 0.0));
    WhatIf w{name, times.makespan(), 0.0};
    if (report.waste_s > 1e-9 * report.actual_s) {
      w.share = (report.actual_s - w.fixed_s) / report.waste_s;
    }
    return std::make_pair(w, times);
  };
  for (int r = 0; r < report.ranks; ++r) {
    const Select select = [r](const ReplayOp& op) { return op.rank == r; };
    MS_ASSIGN_OR_RETURN(auto result, what_if("rank " + std::to_string(r), select));
    report.workers.push_back(result.first);
    const std::vector<double> fixed_steps =
        step_durations(idealized(program, ideal, select), result.second, subsets.steps);
    std::vector<double> row;
    for (size_t i = 0; i < fixed_steps.size(); ++i) {
      row.push_back(fixed_steps[i] > 0 ? actual_steps[i] / fixed_steps[i] : 1.0);
    }
    report.heatmap.push_back(std::move(row));
  }
  for (int stage : subsets.stages) {
    MS_ASSIGN_OR_RETURN(auto result, what_if("stage " + std::to_string(stage),
                                             [stage](const ReplayOp& op) { return op.stage == stage; }));
    report.stages.push_back(result.first);
  }
  for (const std::string& name : subsets.ops) {
    MS_ASSIGN_OR_RETURN(auto result, what_if(name, [name](const ReplayOp& op) { return op.op == name; }));
    report.ops.push_back(result.first);
  }
  return report;
}

namespace {

nlohmann::ordered_json what_if_json(const std::vector<WhatIf>& list) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const WhatIf& w : list) {
    out.push_back({{"name", w.name}, {"fixed_s", w.fixed_s}, {"share", w.share}});
  }
  return out;
}

}  // namespace

nlohmann::ordered_json straggler_report_json(const StragglerReport& report) {
  nlohmann::ordered_json j;
  j["ranks"] = report.ranks;
  j["steps"] = report.steps;
  j["measured_s"] = report.measured_s;
  j["replayed_s"] = report.actual_s;
  j["replay_error"] = report.replay_error();
  j["ideal_s"] = report.ideal_s;
  j["slowdown"] = report.slowdown;
  j["waste_s"] = report.waste_s;
  j["waste_fraction"] = report.actual_s > 0 ? report.waste_s / report.actual_s : 0.0;
  j["workers"] = what_if_json(report.workers);
  j["stages"] = what_if_json(report.stages);
  j["ops"] = what_if_json(report.ops);
  j["heatmap"] = report.heatmap;
  j["pipeline"] = pipeline_bubble_json(report.pipeline);
  return j;
}

}  // namespace ms::diag
