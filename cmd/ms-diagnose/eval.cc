// `ms-diagnose eval`: scores detect on labelled simulated jobs (precision, recall, F1,
// detection delay) beside Minder's published figures. Rules in lib/diag/evaluate.h.
#include "cmd/common/registry.h"

#include <cstdio>
#include <iostream>
#include <memory>

#include "core/thread_pool.h"
#include "diag/evaluate.h"
#include "io/atomic_file.h"

namespace ms::diagnose_cmd {
namespace {

struct EvalArgs {
  diag::EvalSpec spec;
  std::vector<std::string> denoisers;
  std::string out;
  bool json = false;
};

void print_scores(const nlohmann::ordered_json& report) {
  std::printf("# ms-diagnose eval: %d jobs of %d machines x %.0f s, severity %.2f..1, seed %llu\n",
              report["jobs"].get<int>(), report["machines"].get<int>(),
              report["duration_s"].get<double>(), report["min_severity"].get<double>(),
              static_cast<unsigned long long>(report["seed"].get<uint64_t>()));
  std::printf("%-18s %5s %4s %4s %4s %4s %10s %8s %8s %12s\n", "fault", "jobs", "tp", "fp", "fn",
              "tn", "precision", "recall", "f1", "delay s");
  auto row = [](const std::string& name, const nlohmann::ordered_json& s) {
    std::printf("%-18s %5d %4d %4d %4d %4d %10.3f %8.3f %8.3f %12.1f\n", name.c_str(),
                s["jobs"].get<int>(), s["tp"].get<int>(), s["fp"].get<int>(), s["fn"].get<int>(),
                s["tn"].get<int>(), s["precision"].get<double>(), s["recall"].get<double>(),
                s["f1"].get<double>(), s["mean_delay_s"].get<double>());
  };
  for (const auto& [kind, s] : report["by_fault"].items()) row(kind, s);
  row("all", report["scores"]);
  std::printf("%-18s %5s %4s %4s %4s %4s %10.3f %8.3f\n", "Minder (published)", "", "", "", "", "",
              diag::kMinderPrecision, diag::kMinderRecall);
}

Result<int> run_eval(EvalArgs args) {
  MS_ASSIGN_OR_RETURN(diag::DenoiserSet denoisers, diag::load_denoisers(args.denoisers));
  MS_ASSIGN_OR_RETURN(std::vector<diag::JobResult> results,
                      diag::run_evaluation(args.spec, denoisers));
  const nlohmann::ordered_json report = diag::eval_report_json(args.spec, results);
  if (!args.out.empty()) MS_RETURN_IF_ERROR(io::write_file_atomic(args.out, report.dump(2) + "\n"));
  if (args.json) {
    std::cout << report.dump(2) << std::endl;
  } else {
    print_scores(report);
  }
  return 0;
}

void add_eval_command(cli::Tool& tool) {
  auto a = std::make_shared<EvalArgs>();
  a->spec.threads = static_cast<int>(ThreadPool::default_size());
  CLI::App* sub = tool.add_subcommand(
      "eval", "Score detect on labelled simulated jobs: precision, recall, F1, detection delay",
      [a] { return run_eval(*a); });
  sub->add_option("--jobs", a->spec.jobs, "Number of simulated jobs (kinds cycle, 1 in 6 healthy)")
      ->capture_default_str();
  sub->add_option("--seed", a->spec.seed, "Random seed")->capture_default_str();
  sub->add_option("--machines", a->spec.machines, "Machines per job")->capture_default_str();
  sub->add_option("--duration-s", a->spec.duration_s, "Seconds per job")->capture_default_str();
  sub->add_option("--min-severity", a->spec.min_severity,
                  "Faulty jobs' severity is drawn from [this, 1] (1: full-strength faults)")
      ->capture_default_str();
  sub->add_option("--window-s", a->spec.detect.window_s, "detect --window-s")->capture_default_str();
  sub->add_option("--hop-s", a->spec.detect.hop_s, "detect --hop-s")->capture_default_str();
  sub->add_option("--threshold", a->spec.detect.threshold, "detect --threshold")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--period-s", a->spec.detect.period_s, "detect --period-s")->capture_default_str();
  sub->add_option("--denoiser", a->denoisers, "detect --denoiser (repeatable)");
  sub->add_option("--threads", a->spec.threads, "Jobs evaluated in parallel")->capture_default_str();
  sub->add_option("--out", a->out, "Also write the full report (every job) as JSON here");
  cli::add_json_flag(sub, &a->json);
}

}  // namespace

MS_CLI_COMMAND(eval, add_eval_command);

}  // namespace ms::diagnose_cmd
