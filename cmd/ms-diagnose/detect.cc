// `ms-diagnose detect <telemetry dir>`: finds a faulty machine in a job's telemetry with the
// Minder-style detector of lib/diag/detect.h. Exit 0: no fault; 3: a fault was declared.
#include "cmd/common/registry.h"

#include <cstdio>
#include <iostream>
#include <memory>

#include "diag/detect.h"
#include "io/env.h"

namespace ms::diagnose_cmd {
namespace {

struct DetectArgs {
  std::string dir;
  std::string group_by = "host";
  std::vector<std::string> denoisers;
  diag::DetectOptions options;
  bool json = false;
};

// A run directory holds telemetry/; accept either it or the telemetry directory itself.
std::string telemetry_dir(const std::string& dir) {
  const std::string inner = dir + "/telemetry";
  return io::default_env().is_directory(inner) ? inner : dir;
}

void print_text(const diag::DetectReport& report, const diag::AlignedTelemetry& aligned,
                const DetectArgs& args) {
  std::printf("# ms-diagnose detect: %zu machines, %d samples every %.2f s; window %.0f s, hop "
              "%.0f s, threshold %.2f, period %.0f s\n",
              aligned.machines.size(), aligned.samples, aligned.interval_s, args.options.window_s,
              args.options.hop_s, args.options.threshold, args.options.period_s);
  std::printf("%-18s %-15s %12s %-12s %s\n", "metric", "denoiser", "max score", "at machine",
              "verdict");
  const nlohmann::ordered_json j = diag::detect_report_json(report);
  for (const auto& m : j["metrics"]) {
    const std::string fault = m["fault_machine"].get<std::string>();
    std::printf("%-18s %-15s %12.2f %-12s %s\n", m["metric"].get<std::string>().c_str(),
                m["denoiser"].get<std::string>().c_str(),
                m["max_normalized_distance"].get<double>(),
                m["max_machine"].get<std::string>().c_str(),
                fault.empty() ? "-" : ("fault on " + fault).c_str());
  }
  if (!report.fault_found()) {
    std::printf("OK: no machine stayed an outlier for %.0f s\n", args.options.period_s);
    return;
  }
  std::printf("FAULT: machine %s, metric %s, first seen at t=%.3f (+%.1f s), declared at +%.1f "
              "s; normalized distance %.2f in the declaring window\n",
              j["machine"].get<std::string>().c_str(), j["metric"].get<std::string>().c_str(),
              j["first_seen_t"].get<double>(), j["first_seen_s"].get<double>(),
              j["declared_s"].get<double>(),
              j["evidence"]["declaring_window"]["normalized_distance"][j["machine"].get<std::string>()]
                  .get<double>());
}

Result<int> run_detect(const DetectArgs& args) {
  MS_ASSIGN_OR_RETURN(telemetry::GroupBy group_by, telemetry::parse_group_by(args.group_by));
  MS_ASSIGN_OR_RETURN(diag::DenoiserSet denoisers, diag::load_denoisers(args.denoisers));
  MS_ASSIGN_OR_RETURN(auto ranks, telemetry::read_telemetry_dir(telemetry_dir(args.dir)));
  MS_ASSIGN_OR_RETURN(diag::AlignedTelemetry aligned, diag::align_telemetry(ranks, group_by));
  MS_ASSIGN_OR_RETURN(diag::DetectReport report,
                      diag::detect_faults(aligned, denoisers, args.options));
  if (args.json) {
    std::cout << diag::detect_report_json(report).dump(2) << std::endl;
  } else {
    print_text(report, aligned, args);
  }
  return report.fault_found() ? 3 : 0;
}

void add_detect_command(cli::Tool& tool) {
  auto args = std::make_shared<DetectArgs>();
  CLI::App* sub = tool.add_subcommand(
      "detect", "Find a faulty machine in a job's telemetry (Minder); exit 3 when one is found",
      [args] { return run_detect(*args); });
  sub->add_option("dir", args->dir, "Telemetry directory (or a run directory holding telemetry/)")
      ->required();
  sub->add_option("--group-by", args->group_by, "What a machine is: host or rank")
      ->capture_default_str();
  sub->add_option("--window-s", args->options.window_s, "Window length in seconds")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--hop-s", args->options.hop_s, "Seconds between window starts")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--threshold", args->options.threshold,
                  "Normalized distance above which a machine is the window's candidate")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--period-s", args->options.period_s,
                  "Seconds the same machine must stay the candidate before a fault is declared")
      ->capture_default_str()
      ->check(cli::kNonNegativeNumber);
  sub->add_option("--spread-floor", args->options.spread_floor,
                  "Floor added to the distance spread, in units of the metric's scale")
      ->capture_default_str()
      ->check(cli::kNonNegativeNumber);
  sub->add_option("--metrics", args->options.metrics,
                  "Metrics to check, in priority order (default: the built-in priority)")
      ->delimiter(',');
  sub->add_option("--denoiser", args->denoisers,
                  "moving-average (default), none, or a denoiser file from train-denoiser "
                  "(repeat for several metrics)");
  cli::add_json_flag(sub, &args->json);
}

}  // namespace

MS_CLI_COMMAND(detect, add_detect_command);

}  // namespace ms::diagnose_cmd
