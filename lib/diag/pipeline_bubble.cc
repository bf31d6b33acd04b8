// Measured and theoretical pipeline bubble; see pipeline_bubble.h for the definitions.
#include "diag/pipeline_bubble.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "diag/replay.h"
#include "parallel/pp_schedule.h"

namespace ms::diag {
namespace {

// Union-find over ranks.
class RankSets {
 public:
  explicit RankSets(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  size_t find(size_t r) {
    while (parent_[r] != r) r = parent_[r] = parent_[parent_[r]];
    return r;
  }
  void join(size_t a, size_t b) { parent_[find(a)] = find(b); }

 private:
  std::vector<size_t> parent_;
};

// pipeline[r]: index of rank r's pipeline (numbered by lowest rank), -1 when r has no pipeline
// send or recv.
std::vector<int> pipelines_of(const std::vector<std::vector<telemetry::TraceEvent>>& traces) {
  RankSets sets(traces.size());
  std::map<std::string, size_t> first_rank;
  std::vector<bool> in_pipeline(traces.size(), false);
  for (size_t r = 0; r < traces.size(); ++r) {
    for (const telemetry::TraceEvent& e : traces[r]) {
      if (!is_pipeline_p2p(e.is_comm, e.op, e.group)) continue;
      in_pipeline[r] = true;
      sets.join(r, first_rank.try_emplace(e.group, r).first->second);
    }
  }
  std::vector<int> out(traces.size(), -1);
  std::map<size_t, int> index;
  for (size_t r = 0; r < traces.size(); ++r) {
    if (!in_pipeline[r]) continue;
    out[r] = index.try_emplace(sets.find(r), static_cast<int>(index.size())).first->second;
  }
  return out;
}

// Busy time and compute extent of one rank (or pipeline) in one step.
struct Extent {
  double busy = 0;
  double first = std::numeric_limits<double>::infinity();
  double last = -std::numeric_limits<double>::infinity();
  void add(const telemetry::TraceEvent& e) {
    busy += e.t1 - e.t0;
    first = std::min(first, e.t0);
    last = std::max(last, e.t1);
  }
};

void infer_shape(const std::vector<std::vector<telemetry::TraceEvent>>& traces,
                 const std::vector<int>& pipeline, PipelineBubble& out) {
  std::map<int, int> ranks_per_pipeline;
  int max_stage = 0;
  bool split_backward = false;
  for (size_t r = 0; r < traces.size(); ++r) {
    if (pipeline[r] >= 0) ++ranks_per_pipeline[pipeline[r]];
    std::map<int64_t, std::set<int>> mbs_per_step;
    for (const telemetry::TraceEvent& e : traces[r]) {
      if (!is_pipeline_compute(e)) continue;
      max_stage = std::max(max_stage, e.stage);
      split_backward = split_backward || e.op == "bwd_input";
      mbs_per_step[e.step].insert(e.mb);
    }
    for (const auto& [step, mbs] : mbs_per_step) {
      out.micro_batches = std::max(out.micro_batches, static_cast<int>(mbs.size()));
    }
  }
  out.pipelines = static_cast<int>(ranks_per_pipeline.size());
  for (const auto& [p, n] : ranks_per_pipeline) out.pp = std::max(out.pp, n);
  const int64_t stages = static_cast<int64_t>(max_stage) + 1;  // a corrupt stage may be INT_MAX
  out.vpp = static_cast<int>(std::max<int64_t>(1, stages / std::max(1, out.pp)));
  out.schedule = split_backward ? "zero-bubble" : out.vpp > 1 ? "interleaved" : "1f1b";
}

void theoretical_bubble(PipelineBubble& out) {
  Result<parallel::PpScheduleKind> kind = parallel::parse_pp_schedule(out.schedule);
  if (!kind.ok()) {
    out.theoretical_error = kind.status().message();
    return;
  }
  Result<double> bubble =
      parallel::pp_theoretical_bubble({out.pp, out.vpp, out.micro_batches, *kind});
  out.theoretical_known = bubble.ok();
  if (bubble.ok()) {
    out.theoretical = *bubble;
  } else {
    out.theoretical_error = bubble.status().message();
  }
}

}  // namespace

bool is_pipeline_compute(const telemetry::TraceEvent& e) {
  return !e.is_comm &&
         (e.op == "fwd" || e.op == "bwd" || e.op == "bwd_input" || e.op == "bwd_weight");
}

PipelineBubble measure_pipeline_bubble(
    const std::vector<std::vector<telemetry::TraceEvent>>& traces) {
  PipelineBubble out;
  const std::vector<int> pipeline = pipelines_of(traces);
  // [rank][step] and [pipeline][step] extents of pipeline compute.
  std::vector<std::map<int64_t, Extent>> rank_steps(traces.size());
  std::map<int, std::map<int64_t, Extent>> pipeline_steps;
  std::vector<int> lowest_stage(traces.size(), std::numeric_limits<int>::max());
  std::set<int64_t> steps;
  for (size_t r = 0; r < traces.size(); ++r) {
    if (pipeline[r] < 0) continue;
    for (const telemetry::TraceEvent& e : traces[r]) {
      if (!is_pipeline_compute(e)) continue;
      rank_steps[r][e.step].add(e);
      pipeline_steps[pipeline[r]][e.step].add(e);
      lowest_stage[r] = std::min(lowest_stage[r], e.stage);
      steps.insert(e.step);
    }
  }
  std::map<int64_t, std::vector<double>> per_step;
  for (size_t r = 0; r < traces.size(); ++r) {
    if (rank_steps[r].empty()) continue;
    double sum = 0;
    for (const auto& [step, extent] : rank_steps[r]) {
      const Extent& whole = pipeline_steps[pipeline[r]][step];
      const double span = whole.last - whole.first;
      const double bubble = span > 0 ? 1 - extent.busy / span : 0.0;
      per_step[step].push_back(bubble);
      sum += bubble;
    }
    out.ranks.push_back({static_cast<int>(r), pipeline[r], lowest_stage[r],
                         sum / static_cast<double>(rank_steps[r].size())});
  }
  if (out.ranks.empty()) return out;
  out.present = true;
  out.steps.assign(steps.begin(), steps.end());
  for (int64_t s : out.steps) {
    const std::vector<double>& v = per_step[s];
    out.step_bubble.push_back(std::accumulate(v.begin(), v.end(), 0.0) /
                              static_cast<double>(v.size()));
  }
  for (const RankBubble& b : out.ranks) out.measured += b.bubble;
  out.measured /= static_cast<double>(out.ranks.size());
  infer_shape(traces, pipeline, out);
  theoretical_bubble(out);
  return out;
}

namespace {

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

// Mean bubble per stage over the pipelines.
std::map<int, double> stage_bubbles(const PipelineBubble& b) {
  std::map<int, std::pair<double, int>> sums;
  for (const RankBubble& r : b.ranks) {
    auto& [sum, n] = sums[r.stage];
    sum += r.bubble;
    ++n;
  }
  std::map<int, double> out;
  for (const auto& [stage, sum_n] : sums) out[stage] = sum_n.first / sum_n.second;
  return out;
}

}  // namespace

std::string pipeline_bubble_text(const PipelineBubble& b) {
  if (!b.present) return "";
  std::string out = format(
      "pipeline (shape inferred from the trace): pp %d, vpp %d, %d micro-batches per step, "
      "schedule %s, %d pipeline%s\n",
      b.pp, b.vpp, b.micro_batches, b.schedule.c_str(), b.pipelines, b.pipelines == 1 ? "" : "s");
  out += format("  bubble: measured %.4f (mean over ranks and steps), ", b.measured);
  out += b.theoretical_known ? format("theoretical %.4f (%s schedule)\n", b.theoretical,
                                      b.schedule.c_str())
                             : "theoretical unknown: " + b.theoretical_error + "\n";
  out += "  measured per pipeline rank (mean over pipelines and steps):";
  for (const auto& [stage, bubble] : stage_bubbles(b)) {
    out += format(" stage %d %.4f", stage, bubble);
  }
  return out + "\n";
}

nlohmann::ordered_json pipeline_bubble_json(const PipelineBubble& b) {
  nlohmann::ordered_json j;
  j["present"] = b.present;
  if (!b.present) return j;
  j["pp"] = b.pp;
  j["vpp"] = b.vpp;
  j["micro_batches"] = b.micro_batches;
  j["schedule"] = b.schedule;
  j["pipelines"] = b.pipelines;
  j["measured_bubble"] = b.measured;
  j["theoretical_bubble"] = b.theoretical_known ? nlohmann::ordered_json(b.theoretical)
                                                : nlohmann::ordered_json(nullptr);
  if (!b.theoretical_known) j["theoretical_error"] = b.theoretical_error;
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const RankBubble& r : b.ranks) {
    ranks.push_back({{"rank", r.rank}, {"pipeline", r.pipeline}, {"stage", r.stage},
                     {"bubble", r.bubble}});
  }
  j["ranks"] = ranks;
  j["steps"] = b.steps;
  j["step_bubble"] = b.step_bubble;
  return j;
}

}  // namespace ms::diag
