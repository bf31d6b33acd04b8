// Minder-style detection: grid alignment, per-window distances, robust normalization and the
// continuity rule. See detect.h for the algorithm and docs/diagnose-detect.md for its choices.
#include "diag/detect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "diag/robust_stats.h"
#include "io/env.h"

namespace ms::diag {
namespace {

constexpr const char* kCounterSuffixes[] = {"_frames", "_packets", "_count", "_errors"};
// step_samples() makes two metrics: step_comm_wait_s and step_compute_s.
constexpr size_t kStepMetricCount = 2;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "net_tx_bytes" -> "net_tx_rate", "pfc_pause_frames" -> "pfc_pause_rate"; empty when `key`
// is a gauge.
std::string rate_name(const std::string& key) {
  if (key.rfind("net_", 0) == 0 && ends_with(key, "_bytes")) {
    return key.substr(0, key.size() - 6) + "_rate";
  }
  for (const char* suffix : kCounterSuffixes) {
    const std::string s(suffix);
    if (ends_with(key, s)) return key.substr(0, key.size() - s.size()) + "_rate";
  }
  return "";
}

// Each machine's host records, sorted by time, in machine-name order.
std::map<std::string, std::vector<telemetry::HostRecord>> records_by_machine(
    const std::vector<telemetry::RankTelemetry>& ranks, telemetry::GroupBy group_by) {
  std::map<std::string, int> owner;  // machine -> the rank whose records stand for it
  for (const telemetry::RankTelemetry& r : ranks) {
    for (const telemetry::HostRecord& h : r.hosts) {
      auto [it, added] = owner.emplace(telemetry::group_key(h, group_by), h.rank);
      if (!added) it->second = std::min(it->second, h.rank);
    }
  }
  std::map<std::string, std::vector<telemetry::HostRecord>> out;
  for (const telemetry::RankTelemetry& r : ranks) {
    for (const telemetry::HostRecord& h : r.hosts) {
      const std::string key = telemetry::group_key(h, group_by);
      if (owner[key] == h.rank) out[key].push_back(h);
    }
  }
  for (auto& [machine, records] : out) {
    std::stable_sort(records.begin(), records.end(),
                     [](const auto& a, const auto& b) { return a.t < b.t; });
  }
  return out;
}

double median_interval(const std::map<std::string, std::vector<telemetry::HostRecord>>& m) {
  std::vector<double> gaps;
  for (const auto& [machine, records] : m) {
    for (size_t i = 1; i < records.size(); ++i) {
      const double gap = records[i].t - records[i - 1].t;
      if (gap > 0) gaps.push_back(gap);
    }
  }
  // Sampling jitter makes the median a hair off the configured period: round to milliseconds.
  const double interval = std::round(median(gaps) * 1000) / 1000;
  return interval > 0 ? interval : 1.0;
}

// Every numeric value of a host record by name.
std::map<std::string, double> record_values(const telemetry::HostRecord& r) {
  std::map<std::string, double> values = r.extra;
  values["cpu_util"] = r.cpu_util;
  values["mem_used"] = r.mem_used;
  values["net_tx_bytes"] = r.net_tx_bytes;
  values["net_rx_bytes"] = r.net_rx_bytes;
  return values;
}

// One machine's (time, value) samples of every metric, counters already turned into rates.
std::map<std::string, std::vector<std::pair<double, double>>> machine_samples(
    const std::vector<telemetry::HostRecord>& records) {
  std::map<std::string, std::vector<std::pair<double, double>>> out;
  std::map<std::string, double> prev;
  double prev_t = -INFINITY;
  for (const telemetry::HostRecord& r : records) {
    const std::map<std::string, double> values = record_values(r);
    for (const auto& [key, value] : values) {
      const std::string rate = rate_name(key);
      if (rate.empty()) {
        out[key].emplace_back(r.t, value);
        continue;
      }
      auto before = prev.find(key);
      if (before == prev.end() || r.t <= prev_t) continue;
      // A counter that went backwards was reset (reboot, driver reload): no traffic counted.
      const double delta = value >= before->second ? value - before->second : 0.0;
      out[rate].emplace_back(r.t, delta / (r.t - prev_t));
    }
    prev = values;
    prev_t = r.t;
  }
  return out;
}

// Step-phase metrics of one rank, sampled at each step's end: a slow worker shows in its own
// phases (it waits less in collectives than its peers, which wait for it) even where the
// machine-level counters of a shared host cannot tell ranks apart.
std::map<std::string, std::vector<std::pair<double, double>>> step_samples(
    const std::vector<telemetry::StepRecordRead>& steps) {
  std::map<std::string, std::vector<std::pair<double, double>>> out;
  for (const telemetry::StepRecordRead& s : steps) {
    const telemetry::StepPhases& p = s.step.phases;
    out["step_comm_wait_s"].emplace_back(s.t, p.comm_wait_s);
    out["step_compute_s"].emplace_back(s.t, step_compute_s(p));
  }
  return out;
}

// The step records of the rank that stands for each machine (the lowest rank on it).
std::map<std::string, const std::vector<telemetry::StepRecordRead>*> steps_by_machine(
    const std::vector<telemetry::RankTelemetry>& ranks, telemetry::GroupBy group_by) {
  std::map<std::string, const telemetry::RankTelemetry*> owner;
  for (const telemetry::RankTelemetry& r : ranks) {
    if (r.hosts.empty()) continue;
    auto [it, added] = owner.emplace(telemetry::group_key(r.hosts.front(), group_by), &r);
    if (!added && r.rank < it->second->rank) it->second = &r;
  }
  std::map<std::string, const std::vector<telemetry::StepRecordRead>*> out;
  for (const auto& [machine, r] : owner) out[machine] = &r->steps;
  return out;
}

// Places per-step samples on the grid, each holding until the next step ends (0 before the
// first), since steps are slower than the host sampling interval.
std::vector<double> to_grid_held(const std::vector<std::pair<double, double>>& samples, double t0,
                                 double interval, int n) {
  std::vector<double> grid(n, 0.0);
  size_t next = 0;
  double held = 0.0;
  for (int k = 0; k < n; ++k) {
    const double t = t0 + k * interval;
    while (next < samples.size() && samples[next].first <= t + interval / 2) {
      held = samples[next++].second;
    }
    grid[k] = held;
  }
  return grid;
}

// Places samples on the grid; gaps of up to two samples repeat the previous value.
std::vector<double> to_grid(const std::vector<std::pair<double, double>>& samples, double t0,
                            double interval, int n) {
  std::vector<double> grid(n, 0.0);
  std::vector<bool> seen(n, false);
  for (const auto& [t, v] : samples) {
    const long k = std::lround((t - t0) / interval);
    if (k < 0 || k >= n) continue;
    grid[k] = v;
    seen[k] = true;
  }
  int last = -1;
  for (int k = 0; k < n; ++k) {
    if (seen[k]) {
      last = k;
    } else if (last >= 0 && k - last <= 2) {
      grid[k] = grid[last];
    }
  }
  return grid;
}

// Normalized distance of every machine: robust z-score of D with a floor on the spread.
void normalize_distances(WindowScore& w, double threshold, double spread_floor) {
  const double center = median(w.distance);
  const double spread = median_absolute_deviation(w.distance) / kRobustZScale + spread_floor;
  w.score.resize(w.distance.size());
  double best = threshold;
  for (size_t m = 0; m < w.distance.size(); ++m) {
    w.score[m] = (w.distance[m] - center) / spread;
    if (w.score[m] > best) {
      best = w.score[m];
      w.candidate = static_cast<int>(m);
    }
  }
}

// Adds the step-phase metrics (step_samples) when every machine has step records.
void add_step_metrics(const std::vector<telemetry::RankTelemetry>& ranks,
                      telemetry::GroupBy group_by, AlignedTelemetry& out) {
  const auto steps = steps_by_machine(ranks, group_by);
  std::vector<std::map<std::string, std::vector<std::pair<double, double>>>> per_machine;
  for (const std::string& machine : out.machines) {
    auto it = steps.find(machine);
    if (it == steps.end() || it->second->empty()) return;
    per_machine.push_back(step_samples(*it->second));
  }
  for (const auto& [metric, unused] : per_machine.front()) {
    auto& rows = out.metrics[metric];
    for (auto& samples : per_machine) {
      rows.push_back(to_grid_held(samples[metric], out.t0, out.interval_s, out.samples));
    }
  }
}

using MachineRecords = std::map<std::string, std::vector<telemetry::HostRecord>>;

// "dir/rank-00002.jsonl:17": where a host record was read.
std::string record_where(const std::vector<telemetry::RankTelemetry>& ranks,
                         const telemetry::HostRecord& r) {
  for (const telemetry::RankTelemetry& rank : ranks) {
    if (rank.rank == r.rank) {
      return (rank.path.empty() ? "rank " + std::to_string(r.rank) : rank.path) + ":" +
             std::to_string(r.line);
    }
  }
  return "rank " + std::to_string(r.rank);
}

std::string number_text(double v) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.15g", v);
  return text;
}

// The grid holds machines x metrics x samples doubles, and the sample count comes from the
// records' times: refuse a grid above kMaxGridValues before allocating it, naming the two
// records whose times stretch it (one absurd timestamp is the usual cause).
Status check_grid_size(const std::vector<telemetry::RankTelemetry>& ranks,
                       const MachineRecords& by_machine, double interval, size_t metrics) {
  const telemetry::HostRecord* first = nullptr;
  const telemetry::HostRecord* last = nullptr;
  for (const auto& [machine, records] : by_machine) {
    if (!first || records.front().t < first->t) first = &records.front();
    if (!last || records.back().t > last->t) last = &records.back();
  }
  const double samples = std::floor((last->t - first->t) / interval + 0.5) + 1;
  const double values = samples * static_cast<double>(by_machine.size() * metrics);
  if (values <= static_cast<double>(kMaxGridValues)) return Status::OK();
  return InvalidArgument(
      record_where(ranks, *last) + ": key 't' = " + number_text(last->t) + " lies " +
      number_text(last->t - first->t) + " s after the earliest host record (" +
      record_where(ranks, *first) + ", t = " + number_text(first->t) +
      "); sampled every " + number_text(interval) + " s that needs " + number_text(samples) +
      " samples x " + std::to_string(by_machine.size()) + " machines x " +
      std::to_string(metrics) + " metrics, above the limit of " +
      std::to_string(kMaxGridValues) +
      " values. A timestamp this far from the others is corrupt or from another run; remove "
      "it, or split the telemetry into shorter spans");
}

}  // namespace

bool is_rate_metric(const std::string& metric) {
  return metric.size() > 5 && metric.compare(metric.size() - 5, 5, "_rate") == 0;
}

bool is_step_metric(const std::string& metric) { return metric.rfind("step_", 0) == 0; }

Result<AlignedTelemetry> align_telemetry(const std::vector<telemetry::RankTelemetry>& ranks,
                                         telemetry::GroupBy group_by) {
  const auto by_machine = records_by_machine(ranks, group_by);
  if (by_machine.empty()) return NotFound("the telemetry holds no host records");
  if (by_machine.size() < 3) {
    return InvalidArgument("detect compares machines with each other and needs at least 3; the "
                           "telemetry has " + std::to_string(by_machine.size()) +
                           " (try --group-by rank on a single host)");
  }
  AlignedTelemetry out;
  out.interval_s = median_interval(by_machine);
  std::set<std::string> names;
  std::vector<std::map<std::string, std::vector<std::pair<double, double>>>> per_machine;
  for (const auto& [machine, records] : by_machine) {
    out.machines.push_back(machine);
    per_machine.push_back(machine_samples(records));
    for (const auto& [metric, samples] : per_machine.back()) names.insert(metric);
  }
  // The step-phase metrics (add_step_metrics) may join the host metrics on the same grid.
  MS_RETURN_IF_ERROR(
      check_grid_size(ranks, by_machine, out.interval_s, names.size() + kStepMetricCount));
  double t_first = INFINITY, t_last = -INFINITY;
  for (const auto& [machine, records] : by_machine) {
    t_first = std::min(t_first, records.front().t);
    t_last = std::max(t_last, records.back().t);
  }
  out.t0 = t_first;
  out.samples = static_cast<int>(std::floor((t_last - t_first) / out.interval_s + 0.5)) + 1;
  for (const std::string& metric : names) {
    auto& rows = out.metrics[metric];
    for (auto& samples : per_machine) {
      rows.push_back(to_grid(samples[metric], out.t0, out.interval_s, out.samples));
    }
  }
  add_step_metrics(ranks, group_by, out);
  return out;
}

const std::vector<std::string>& default_metric_priority() {
  static const std::vector<std::string> order = {"cpu_util",    "gpu_util",    "pfc_pause_rate",
                                                 "net_tx_rate", "net_rx_rate", "gpu_mem_used",
                                                 "mem_used"};
  return order;
}

Result<std::vector<std::string>> metrics_to_check(const AlignedTelemetry& aligned,
                                                  const std::vector<std::string>& requested) {
  std::vector<std::string> out;
  for (const std::string& m : requested) {
    if (aligned.metrics.count(m) == 0) {
      std::string available;
      for (const auto& [name, values] : aligned.metrics) available += " " + name;
      return NotFound("metric '" + m + "' is not in the telemetry; available:" + available);
    }
    out.push_back(m);
  }
  if (!out.empty()) return out;
  for (const std::string& m : default_metric_priority()) {
    if (aligned.metrics.count(m)) out.push_back(m);
  }
  for (const auto& [name, values] : aligned.metrics) {
    if (is_step_metric(name)) continue;  // checked only when asked for by name
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

double metric_scale(const std::vector<std::vector<double>>& values, bool is_rate) {
  double scale = is_rate ? 1.0 : 1e-9;
  std::vector<double> magnitudes;
  for (const std::vector<double>& row : values) {
    magnitudes.resize(row.size());
    std::transform(row.begin(), row.end(), magnitudes.begin(), [](double v) { return std::fabs(v); });
    scale = std::max(scale, median(magnitudes));
  }
  return scale;
}

std::vector<WindowScore> score_windows(const std::vector<std::vector<double>>& values,
                                       const Denoiser& denoiser, int window, int hop,
                                       double threshold, double spread_floor, double t0,
                                       double interval_s) {
  const size_t machines = values.size();
  const int samples = machines == 0 ? 0 : static_cast<int>(values[0].size());
  std::vector<WindowScore> out;
  std::vector<std::vector<double>> smooth(machines, std::vector<double>(window));
  for (int start = 0; start + window <= samples; start += hop) {
    for (size_t m = 0; m < machines; ++m) {
      denoiser.denoise(std::span<const double>(values[m]).subspan(start, window), smooth[m]);
    }
    WindowScore w;
    w.t_end = t0 + (start + window - 1) * interval_s;
    w.distance.assign(machines, 0.0);
    for (size_t a = 0; a < machines; ++a) {
      for (size_t b = a + 1; b < machines; ++b) {
        double sum = 0;
        for (int i = 0; i < window; ++i) sum += (smooth[a][i] - smooth[b][i]) * (smooth[a][i] - smooth[b][i]);
        const double rms = std::sqrt(sum / window);
        w.distance[a] += rms / static_cast<double>(machines - 1);
        w.distance[b] += rms / static_cast<double>(machines - 1);
      }
    }
    normalize_distances(w, threshold, spread_floor);
    out.push_back(std::move(w));
  }
  return out;
}

std::optional<PersistentCandidate> find_persistent_candidate(
    const std::vector<WindowScore>& windows, double period_s) {
  size_t run_start = 0;
  for (size_t i = 0; i < windows.size(); ++i) {
    const int c = windows[i].candidate;
    if (c < 0) continue;
    if (i == 0 || windows[i - 1].candidate != c) run_start = i;
    if (windows[i].t_end - windows[run_start].t_end >= period_s) {
      return PersistentCandidate{c, run_start, i, windows[run_start].t_end, windows[i].t_end};
    }
  }
  return std::nullopt;
}

const Denoiser& DenoiserSet::for_metric(const std::string& metric) const {
  auto it = per_metric.find(metric);
  return it != per_metric.end() ? *it->second : *fallback;
}

Result<DenoiserSet> load_denoisers(const std::vector<std::string>& specs) {
  DenoiserSet set;
  for (const std::string& spec : specs) {
    if (spec == "moving-average") {
      set.fallback = std::make_shared<MovingAverageDenoiser>();
    } else if (spec == "none") {
      set.fallback = std::make_shared<IdentityDenoiser>();
    } else {
      MS_ASSIGN_OR_RETURN(DenoiserModel model, load_denoiser(io::default_env(), spec));
      if (set.per_metric.count(model.metric)) {
        return InvalidArgument("two denoiser files are for metric '" + model.metric +
                               "' (the second is '" + spec + "'); give one per metric");
      }
      set.per_metric[model.metric] = std::make_shared<LstmVaeDenoiser>(std::move(model.model));
    }
  }
  return set;
}

std::vector<std::vector<double>> training_windows(const AlignedTelemetry& aligned,
                                                  const std::string& metric, int window,
                                                  int stride) {
  std::vector<std::vector<double>> out;
  auto it = aligned.metrics.find(metric);
  if (it == aligned.metrics.end() || window < 1 || stride < 1) return out;
  const double scale = metric_scale(it->second, is_rate_metric(metric));
  std::vector<double> cut(window);
  for (const std::vector<double>& row : it->second) {
    for (size_t start = 0; start + window <= row.size(); start += stride) {
      for (int i = 0; i < window; ++i) cut[i] = row[start + i] / scale;
      out.push_back(centered(cut));
    }
  }
  return out;
}

std::string DetectReport::machine() const {
  if (!fault_found()) return "";
  return machines[metrics[verdict_metric].fault->machine];
}

namespace {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

// Window and hop in samples, checked against the data and the denoiser.
Result<std::pair<int, int>> window_samples(const AlignedTelemetry& aligned,
                                           const DetectOptions& options, const Denoiser& d,
                                           const std::string& metric) {
  // Rounded in double and compared with the sample count before any cast to int, so an
  // absurd option cannot overflow the conversion.
  const double window_count = std::round(options.window_s / aligned.interval_s);
  const double hop_count = std::round(options.hop_s / aligned.interval_s);
  if (!(window_count >= 2) || !(hop_count >= 1)) {
    return InvalidArgument("--window-s and --hop-s must span at least 2 and 1 samples of " +
                           std::to_string(aligned.interval_s) + " s");
  }
  if (window_count > aligned.samples) {
    return InvalidArgument("the window (" + seconds_text(window_count) +
                           " samples) is longer than the job's telemetry (" +
                           std::to_string(aligned.samples) + " samples)");
  }
  const int window = static_cast<int>(window_count);
  const int hop = static_cast<int>(std::min<double>(hop_count, aligned.samples));
  if (d.required_window() != 0 && d.required_window() != window) {
    return InvalidArgument("the denoiser for '" + metric + "' was trained on " +
                           std::to_string(d.required_window()) + "-sample windows but the window is " +
                           std::to_string(window) + " samples; run with --window-s " +
                           seconds_text(d.required_window() * aligned.interval_s));
  }
  return std::make_pair(window, hop);
}

}  // namespace

Status check_detect_options(const DetectOptions& options) {
  const struct {
    const char* flag;
    double value;
    bool zero_allowed;
  } checks[] = {{"--window-s", options.window_s, false},
                {"--hop-s", options.hop_s, false},
                {"--threshold", options.threshold, false},
                {"--period-s", options.period_s, true},
                {"--spread-floor", options.spread_floor, true}};
  for (const auto& c : checks) {
    if (std::isfinite(c.value) && (c.value > 0 || (c.zero_allowed && c.value == 0))) continue;
    return InvalidArgument(std::string(c.flag) + " must be a finite number " +
                           (c.zero_allowed ? "at least 0" : "above 0") + " (got " +
                           seconds_text(c.value) + ")");
  }
  return Status::OK();
}

Result<DetectReport> detect_faults(const AlignedTelemetry& aligned, const DenoiserSet& denoisers,
                                   const DetectOptions& options) {
  MS_RETURN_IF_ERROR(check_detect_options(options));
  MS_ASSIGN_OR_RETURN(std::vector<std::string> metrics, metrics_to_check(aligned, options.metrics));
  DetectReport report;
  report.machines = aligned.machines;
  report.t0 = aligned.t0;
  for (const std::string& metric : metrics) {
    const Denoiser& denoiser = denoisers.for_metric(metric);
    MS_ASSIGN_OR_RETURN(auto sizes, window_samples(aligned, options, denoiser, metric));
    const auto& raw = aligned.metrics.at(metric);
    MetricResult result;
    result.metric = metric;
    result.denoiser = denoiser.name();
    result.scale = metric_scale(raw, is_rate_metric(metric));
    std::vector<std::vector<double>> normalized = raw;
    for (auto& row : normalized) {
      for (double& v : row) v /= result.scale;
    }
    result.windows = score_windows(normalized, denoiser, sizes.first, sizes.second,
                                   options.threshold, options.spread_floor, aligned.t0,
                                   aligned.interval_s);
    result.fault = find_persistent_candidate(result.windows, options.period_s);
    if (result.fault && report.verdict_metric < 0) {
      report.verdict_metric = static_cast<int>(report.metrics.size());
    }
    report.metrics.push_back(std::move(result));
  }
  return report;
}

namespace {

nlohmann::ordered_json window_evidence(const DetectReport& report, const WindowScore& w) {
  nlohmann::ordered_json j;
  j["t_end"] = w.t_end;
  nlohmann::ordered_json scores, distances;
  for (size_t m = 0; m < report.machines.size(); ++m) {
    scores[report.machines[m]] = w.score[m];
    distances[report.machines[m]] = w.distance[m];
  }
  j["normalized_distance"] = scores;
  j["distance"] = distances;
  return j;
}

nlohmann::ordered_json metric_summary(const DetectReport& report, const MetricResult& r) {
  nlohmann::ordered_json j;
  j["metric"] = r.metric;
  j["denoiser"] = r.denoiser;
  j["scale"] = r.scale;
  j["windows"] = r.windows.size();
  double top = 0;
  int top_machine = -1;
  for (const WindowScore& w : r.windows) {
    for (size_t m = 0; m < w.score.size(); ++m) {
      if (w.score[m] > top) {
        top = w.score[m];
        top_machine = static_cast<int>(m);
      }
    }
  }
  j["max_normalized_distance"] = top;
  j["max_machine"] = top_machine >= 0 ? report.machines[top_machine] : "";
  j["fault_machine"] = r.fault ? report.machines[r.fault->machine] : "";
  if (r.fault) j["declared_t"] = r.fault->declared_t;
  return j;
}

}  // namespace

nlohmann::ordered_json detect_report_json(const DetectReport& report) {
  nlohmann::ordered_json j;
  j["fault"] = report.fault_found();
  j["machines"] = report.machines;
  j["t0"] = report.t0;
  if (report.fault_found()) {
    const MetricResult& r = report.metrics[report.verdict_metric];
    const PersistentCandidate& c = *r.fault;
    j["machine"] = report.machines[c.machine];
    j["metric"] = r.metric;
    j["first_seen_t"] = c.first_seen_t;
    j["first_seen_s"] = c.first_seen_t - report.t0;
    j["declared_t"] = c.declared_t;
    j["declared_s"] = c.declared_t - report.t0;
    j["evidence"] = {{"first_window", window_evidence(report, r.windows[c.first_window])},
                     {"declaring_window", window_evidence(report, r.windows[c.declared_window])}};
  }
  nlohmann::ordered_json metrics = nlohmann::ordered_json::array();
  for (const MetricResult& r : report.metrics) metrics.push_back(metric_summary(report, r));
  j["metrics"] = metrics;
  return j;
}

}  // namespace ms::diag
