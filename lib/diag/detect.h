// Faulty-machine detection from a job's telemetry, after Minder (Deng et al., "Minder: Faulty
// Machine Detection for Large-scale Distributed Model Training", NSDI 2025). The machines of a
// data/pipeline-parallel job do the same work, so their metrics move together; a faulty machine
// is the one whose metric stops looking like everyone else's, for long enough. Per metric, in
// priority order:
//   1. align every machine's samples on one time grid (rates from cumulative counters; a
//      machine that stops reporting reads as 0) and divide by the metric's scale;
//   2. slide a window over the grid; denoise each machine's window (denoise.h);
//   3. distance D_m = mean over other machines k of the RMS difference of the two windows;
//   4. normalized distance s_m = (D_m - median D) / (MAD(D) / 0.6745 + spread_floor), a robust
//      z-score whose floor keeps tiny but consistent differences from counting;
//   5. the window's candidate is the machine with the largest s_m when it exceeds the threshold;
//   6. a fault is declared when the same machine is the candidate in every window for period_s.
// The first metric in priority order that declares a fault gives the verdict; the others are
// still scored and reported as evidence. docs/diagnose-detect.md describes the choices.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "diag/denoise.h"
#include "telemetry/reader.h"

namespace ms::diag {

// Every machine's metrics on one time grid.
struct AlignedTelemetry {
  double t0 = 0;          // time of sample 0, seconds since the Unix epoch
  double interval_s = 1;  // grid spacing: the median spacing of the host records
  int samples = 0;
  std::vector<std::string> machines;
  // metric name -> values[machine][sample]; samples a machine did not report hold 0.
  std::map<std::string, std::vector<std::vector<double>>> metrics;
};

// The most values (machines x metrics x samples, 8 bytes each: 512 MiB) the grid may hold.
inline constexpr size_t kMaxGridValues = size_t{1} << 26;

// Builds the grid from host records. Machines are hosts (the lowest rank's records of each host)
// or ranks ("rank<N>"). Gauges are taken as reported; cumulative counters (keys starting with
// net_ and ending in _bytes, and keys ending in _frames, _packets, _count or _errors) become
// per-second rates named with the suffix replaced by "_rate" (net_tx_bytes -> net_tx_rate,
// pfc_pause_frames -> pfc_pause_rate). Gaps of up to two samples are filled with the previous
// value; longer gaps read 0. NotFound when there are no host records; InvalidArgument when
// fewer than three machines reported (a majority is needed to call one machine different), or
// when the records' time span would make the grid larger than kMaxGridValues (naming the
// earliest and latest records' file:line), which is checked before the grid is allocated.
Result<AlignedTelemetry> align_telemetry(const std::vector<telemetry::RankTelemetry>& ranks,
                                         telemetry::GroupBy group_by);

// The metric priority of docs/diagnose-detect.md: utilization first (cpu_util, gpu_util), then
// network health (pfc_pause_rate, net_tx_rate, net_rx_rate), then memory (gpu_mem_used,
// mem_used).
const std::vector<std::string>& default_metric_priority();

// The metrics to check, in order: `requested` when given (NotFound naming the available
// metrics when one is absent), otherwise the default priority list restricted to the metrics
// present followed by the remaining metrics in name order.
Result<std::vector<std::string>> metrics_to_check(const AlignedTelemetry& aligned,
                                                  const std::vector<std::string>& requested);

// A metric's scale: the largest per-machine median of |value|, at least 1 for counter rates
// (whole events per second) and 1e-9 for gauges.
double metric_scale(const std::vector<std::vector<double>>& values, bool is_rate);
bool is_rate_metric(const std::string& metric);
// Per-rank step-phase metrics from the step records ("step_comm_wait_s", "step_compute_s"),
// held from one step's end to the next. They tell ranks on one shared host apart, but they
// are checked only when named in DetectOptions::metrics: a job's phases also move with its
// data and schedule, which the default machine-level priority list is not exposed to.
bool is_step_metric(const std::string& metric);
// A step's "step_compute_s": its forward and backward seconds, the rank's own work.
inline double step_compute_s(const telemetry::StepPhases& p) { return p.fwd_s + p.bwd_s; }

struct DetectOptions {
  double window_s = 60;
  double hop_s = 10;
  double threshold = 3;
  double period_s = 240;
  double spread_floor = 0.02;  // in units of the metric's scale
  std::vector<std::string> metrics;  // empty: default priority
};

// InvalidArgument naming the flag (--window-s, --hop-s, --threshold, --period-s,
// --spread-floor) of the first option that is not a finite number in its range: window and
// hop positive, threshold positive, period and spread floor at least 0. A NaN threshold makes
// every comparison false, so no machine could ever be declared faulty.
Status check_detect_options(const DetectOptions& options);

// One window's distances and normalized scores, indexed like AlignedTelemetry::machines.
struct WindowScore {
  double t_end = 0;  // time of the window's last sample
  std::vector<double> distance, score;
  int candidate = -1;  // -1: no machine above the threshold
};

// Scores every window of `values` (machine, sample), already divided by the metric's scale.
// Windows hold `window` samples and start every `hop` samples.
std::vector<WindowScore> score_windows(const std::vector<std::vector<double>>& values,
                                       const Denoiser& denoiser, int window, int hop,
                                       double threshold, double spread_floor, double t0,
                                       double interval_s);

// The continuity rule: the first run of consecutive windows with one and the same candidate
// whose last window ends at least period_s after the first one's. nullopt when there is none.
struct PersistentCandidate {
  int machine = -1;
  size_t first_window = 0, declared_window = 0;
  double first_seen_t = 0, declared_t = 0;
};
std::optional<PersistentCandidate> find_persistent_candidate(
    const std::vector<WindowScore>& windows, double period_s);

// Which denoiser each metric gets: a per-metric LSTM-VAE where one was loaded, else `fallback`.
struct DenoiserSet {
  std::map<std::string, std::shared_ptr<const Denoiser>> per_metric;
  std::shared_ptr<const Denoiser> fallback = std::make_shared<MovingAverageDenoiser>();
  const Denoiser& for_metric(const std::string& metric) const;
};

// Builds the denoiser set from --denoiser values: "moving-average" (the default) or "none" set
// the fallback; any other value is a denoiser file (lstm_vae.h) that applies to the metric it
// was trained for. Errors of loading pass through; InvalidArgument when two files are for the
// same metric.
Result<DenoiserSet> load_denoisers(const std::vector<std::string>& specs);

// Training windows for a metric's denoiser: every machine's series divided by the metric's
// scale, cut into `window`-sample windows every `stride` samples, each centered (denoise.h).
std::vector<std::vector<double>> training_windows(const AlignedTelemetry& aligned,
                                                  const std::string& metric, int window,
                                                  int stride);

struct MetricResult {
  std::string metric, denoiser;
  double scale = 1;
  std::vector<WindowScore> windows;
  std::optional<PersistentCandidate> fault;
};

struct DetectReport {
  std::vector<std::string> machines;
  double t0 = 0;
  std::vector<MetricResult> metrics;  // in the order checked
  int verdict_metric = -1;            // index into metrics of the verdict; -1: healthy
  bool fault_found() const { return verdict_metric >= 0; }
  // The verdict's machine name; empty when healthy.
  std::string machine() const;
};

// Runs the detector. InvalidArgument when the options do not fit the data (window longer than
// the job, a denoiser trained for another window length, non-positive hop).
Result<DetectReport> detect_faults(const AlignedTelemetry& aligned, const DenoiserSet& denoisers,
                                   const DetectOptions& options);

// The report as JSON: verdict (machine, metric, first_seen_t, declared_t, and the scores of
// every machine in the first and declaring windows as evidence) and a per-metric summary.
nlohmann::ordered_json detect_report_json(const DetectReport& report);

}  // namespace ms::diag
