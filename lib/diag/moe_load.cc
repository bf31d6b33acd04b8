// Expert-load summary of MoE step records; see moe_load.h for the definitions.
#include "diag/moe_load.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string_view>

namespace ms::diag {

namespace {

using telemetry::StepRecordRead;

std::string where(const telemetry::RankTelemetry& rank, const StepRecordRead& r) {
  return rank.path + ":" + std::to_string(r.line);
}

std::string shape_text(const StepRecordRead& r) {
  const auto& layers = r.step.expert_tokens;
  return std::to_string(layers.size()) + " MoE layers x " + std::to_string(layers[0].size()) +
         " experts";
}

// Whether `r` holds `layers` x `experts` counts and at most one drop count per layer. The reader
// guarantees a record is rectangular; records built by hand are checked here all the same.
bool has_shape(const StepRecordRead& r, size_t layers, size_t experts) {
  const auto& counts = r.step.expert_tokens;
  if (counts.size() != layers) return false;
  for (const std::vector<int64_t>& layer : counts) {
    if (layer.size() != experts) return false;
  }
  return r.step.dropped_tokens.empty() || r.step.dropped_tokens.size() == layers;
}

// The last record of each step number that carries expert counts, in step order. Every record
// must have the first one's shape.
Result<std::vector<const StepRecordRead*>> steps_with_counts(const telemetry::RankTelemetry& rank,
                                                             int64_t& without_counts) {
  std::map<int64_t, const StepRecordRead*> by_step;
  const StepRecordRead* first = nullptr;
  without_counts = 0;
  for (const StepRecordRead& r : rank.steps) {
    if (r.step.expert_tokens.empty()) {
      ++without_counts;
      continue;
    }
    if (first == nullptr) first = &r;
    const size_t experts = first->step.expert_tokens[0].size();
    if (experts == 0 || !has_shape(r, first->step.expert_tokens.size(), experts)) {
      return Corruption(where(rank, r) + ": key 'expert_tokens' holds " + shape_text(r) +
                        " but " + where(rank, *first) + " holds " + shape_text(*first) +
                        "; one run's records must agree, every layer with the same experts");
    }
    by_step[r.step.step] = &r;
  }
  std::vector<const StepRecordRead*> out;
  for (const auto& [step, record] : by_step) out.push_back(record);
  return out;
}

// max / mean of `counts`; 0 when they sum to 0. Summed in double: the counts are each at most
// INT64_MAX, so a crafted file cannot overflow it.
double imbalance_of(const std::vector<int64_t>& counts) {
  double sum = 0;
  int64_t max = 0;
  for (int64_t c : counts) {
    sum += static_cast<double>(c);
    max = std::max(max, c);
  }
  if (sum == 0) return 0;
  return static_cast<double>(max) * static_cast<double>(counts.size()) / sum;
}

// sum += value, or Corruption naming the record when the total leaves int64.
Status add_count(int64_t& sum, int64_t value, const std::string& at, std::string_view key) {
  if (!__builtin_add_overflow(sum, value, &sum)) return Status::OK();
  return Corruption(at + ": key '" + std::string(key) +
                    "' makes the run's total exceed 2^63 - 1 tokens");
}

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

std::string verdict_of(const MoeLayerLoad& l, double balanced_below) {
  std::string v;
  if (l.routed == 0) {
    v = "no tokens routed";
  } else if (l.imbalance < balanced_below) {
    v = "balanced";
  } else {
    v = format("expert %d is hot: %.1f%% of the tokens, %.2fx the mean", l.hot_expert,
               100 * l.shares[l.hot_expert], l.imbalance);
    if (l.idle_experts > 0) v += format("; %d experts got none", l.idle_experts);
  }
  if (l.dropped > 0) {
    v += format("; %.2f%% of the tokens dropped in %lld steps", 100 * l.dropped_share,
                static_cast<long long>(l.steps_with_drops));
  }
  return v;
}

// Adds one step's counts of layer `layer` to `l`; `at` names the record for errors.
Status add_step(const StepRecordRead& r, size_t layer, const std::string& at, MoeLayerLoad& l) {
  const std::vector<int64_t>& counts = r.step.expert_tokens[layer];
  for (size_t e = 0; e < counts.size(); ++e) {
    MS_RETURN_IF_ERROR(add_count(l.tokens[e], counts[e], at, "expert_tokens"));
    MS_RETURN_IF_ERROR(add_count(l.routed, counts[e], at, "expert_tokens"));
  }
  const double step_imbalance = imbalance_of(counts);
  if (step_imbalance > l.worst_step_imbalance) {
    l.worst_step_imbalance = step_imbalance;
    l.worst_step = r.step.step;
  }
  const int64_t dropped = r.step.dropped_tokens.empty() ? 0 : r.step.dropped_tokens[layer];
  MS_RETURN_IF_ERROR(add_count(l.dropped, dropped, at, "dropped_tokens"));
  if (dropped > 0) ++l.steps_with_drops;
  if (dropped > l.most_dropped) {
    l.most_dropped = dropped;
    l.most_dropped_step = r.step.step;
  }
  return Status::OK();
}

// Shares, imbalance, hot and idle experts and the verdict from the summed counts.
void finish_layer(MoeLayerLoad& l, double balanced_below) {
  l.shares.assign(l.tokens.size(), 0.0);
  for (size_t e = 0; e < l.tokens.size(); ++e) {
    if (l.routed > 0) {
      l.shares[e] = static_cast<double>(l.tokens[e]) / static_cast<double>(l.routed);
    }
    if (l.tokens[e] > l.tokens[l.hot_expert]) l.hot_expert = static_cast<int>(e);
    if (l.tokens[e] == 0) ++l.idle_experts;
  }
  l.imbalance = imbalance_of(l.tokens);
  const double requested = static_cast<double>(l.routed) + static_cast<double>(l.dropped);
  l.dropped_share = requested > 0 ? static_cast<double>(l.dropped) / requested : 0;
  l.verdict = verdict_of(l, balanced_below);
}

}  // namespace

Result<MoeLoadReport> summarize_moe_load(const telemetry::RankTelemetry& rank,
                                         double balanced_below) {
  if (!(balanced_below >= 1)) {
    return InvalidArgument(format("the balanced threshold must be at least 1 (max / mean of a "
                                  "perfectly balanced layer), not %g",
                                  balanced_below));
  }
  MoeLoadReport report;
  report.source = rank.path;
  report.rank = rank.rank;
  report.balanced_below = balanced_below;
  MS_ASSIGN_OR_RETURN(std::vector<const StepRecordRead*> steps,
                      steps_with_counts(rank, report.steps_without_counts));
  if (steps.empty()) {
    return NotFound(rank.path +
                    ": no expert_tokens in the step records: not a MoE run, or written before "
                    "this version");
  }
  report.steps = static_cast<int64_t>(steps.size());
  report.first_step = steps.front()->step.step;
  report.last_step = steps.back()->step.step;
  const size_t layers = steps.front()->step.expert_tokens.size();
  report.experts = static_cast<int>(steps.front()->step.expert_tokens[0].size());
  for (size_t layer = 0; layer < layers; ++layer) {
    MoeLayerLoad l;
    l.layer = static_cast<int>(layer);
    l.tokens.assign(report.experts, 0);
    for (const StepRecordRead* r : steps) {
      MS_RETURN_IF_ERROR(add_step(*r, layer, where(rank, *r), l));
    }
    finish_layer(l, balanced_below);
    report.layers.push_back(std::move(l));
  }
  return report;
}

namespace {

std::string expert_table(const MoeLayerLoad& l) {
  std::string out = format("# layer %d: %lld tokens routed, %lld dropped\n", l.layer,
                           static_cast<long long>(l.routed), static_cast<long long>(l.dropped));
  out += format("#%8s %14s  %7s  %9s\n", "expert", "tokens", "share", "load/mean");
  const double mean = static_cast<double>(l.routed) / static_cast<double>(l.tokens.size());
  for (size_t e = 0; e < l.tokens.size(); ++e) {
    out += format("%9zu %14lld  %6.2f%%  %9.2f\n", e, static_cast<long long>(l.tokens[e]),
                  100 * l.shares[e], mean > 0 ? static_cast<double>(l.tokens[e]) / mean : 0.0);
  }
  return out;
}

std::string summary_row(const MoeLayerLoad& l) {
  return format("%7d  %9.2f  %11.2f  %10lld  %12lld  ", l.layer, l.imbalance,
                l.worst_step_imbalance, static_cast<long long>(l.worst_step),
                static_cast<long long>(l.dropped)) +
         l.verdict + "\n";
}

}  // namespace

std::string moe_load_text(const MoeLoadReport& r) {
  std::string out = format("# ms-diagnose moe-load: %lld steps (%lld..%lld), %zu MoE layers x %d "
                           "experts, from ",
                           static_cast<long long>(r.steps), static_cast<long long>(r.first_step),
                           static_cast<long long>(r.last_step), r.layers.size(), r.experts) +
                    r.source + "\n";
  out += "# counts are global (summed over the job's ranks by the trainer), so rank " +
         std::to_string(r.rank) + "'s records are read alone\n";
  if (r.steps_without_counts > 0) {
    out += format("# %lld step records without expert counts were left out\n",
                  static_cast<long long>(r.steps_without_counts));
  }
  out += format("# imbalance = max expert load / mean expert load (1.00 = perfectly balanced); "
                "balanced below %.2f\n",
                r.balanced_below);
  for (const MoeLayerLoad& l : r.layers) out += "#\n" + expert_table(l);
  out += format("#\n#%6s  %9s  %11s  %10s  %12s  %s\n", "layer", "imbalance", "worst step",
                "(step)", "dropped", "verdict");
  for (const MoeLayerLoad& l : r.layers) out += summary_row(l);
  return out;
}

nlohmann::ordered_json moe_load_json(const MoeLoadReport& r) {
  nlohmann::ordered_json j;
  j["source"] = r.source;
  j["rank"] = r.rank;
  j["steps"] = r.steps;
  j["first_step"] = r.first_step;
  j["last_step"] = r.last_step;
  j["steps_without_counts"] = r.steps_without_counts;
  j["experts"] = r.experts;
  j["balanced_below"] = r.balanced_below;
  j["layers"] = nlohmann::ordered_json::array();
  for (const MoeLayerLoad& l : r.layers) {
    nlohmann::ordered_json layer;
    layer["layer"] = l.layer;
    layer["tokens"] = l.tokens;
    layer["shares"] = l.shares;
    layer["routed"] = l.routed;
    layer["imbalance"] = l.imbalance;
    layer["hot_expert"] = l.hot_expert;
    layer["idle_experts"] = l.idle_experts;
    layer["worst_step"] = l.worst_step;
    layer["worst_step_imbalance"] = l.worst_step_imbalance;
    layer["dropped"] = l.dropped;
    layer["dropped_share"] = l.dropped_share;
    layer["steps_with_drops"] = l.steps_with_drops;
    layer["most_dropped"] = l.most_dropped;
    layer["most_dropped_step"] = l.most_dropped_step;
    layer["verdict"] = l.verdict;
    j["layers"].push_back(std::move(layer));
  }
  return j;
}

}  // namespace ms::diag
