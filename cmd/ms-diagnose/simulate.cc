// `ms-diagnose simulate`: writes a simulated job for trying and testing detect and stragglers:
// multi-machine telemetry with one labelled fault, or (--traces) per-rank traces of a dp x pp
// job with one slowed worker. Models in lib/diag/simulate.h.
#include "cmd/common/registry.h"

#include <cstdio>
#include <memory>

#include "diag/simulate.h"

namespace ms::diagnose_cmd {
namespace {

struct SimulateArgs {
  std::string out;
  std::string fault = "none";
  diag::JobSimSpec job;
  bool traces = false;
  diag::TraceSimSpec trace;
  double slow_gap_ms = 0;
};

Result<int> run_simulate(SimulateArgs args) {
  if (args.traces) {
    args.trace.seed = args.job.seed;
    args.trace.slow_gap_s = args.slow_gap_ms / 1e3;
    MS_ASSIGN_OR_RETURN(auto traces, diag::simulate_traces(args.trace));
    MS_RETURN_IF_ERROR(diag::write_traces(traces, args.trace, args.out));
    std::printf("wrote traces of %d ranks (dp %d x pp %d), %d steps, slow rank %d (x%.2f) to "
                "%s/trace\n",
                args.trace.dp * args.trace.pp, args.trace.dp, args.trace.pp, args.trace.steps,
                args.trace.slow_rank, args.trace.slow_factor, args.out.c_str());
    return 0;
  }
  MS_ASSIGN_OR_RETURN(args.job.fault, diag::parse_fault_kind(args.fault));
  MS_ASSIGN_OR_RETURN(diag::SimulatedJob job, diag::simulate_job(args.job));
  MS_RETURN_IF_ERROR(diag::write_job(job, args.out));
  std::printf("wrote %zu ranks on %d machines, %.0f s, fault %s%s to %s/telemetry\n",
              job.ranks.size(), args.job.machines, args.job.duration_s, args.fault.c_str(),
              job.label.machine.empty() ? "" : (" on " + job.label.machine).c_str(),
              args.out.c_str());
  return 0;
}

void add_trace_options(CLI::App* sub, SimulateArgs& a) {
  sub->add_flag("--traces", a.traces, "Write per-rank traces (trace/) instead of telemetry");
  sub->add_option("--dp", a.trace.dp, "Traces: data-parallel size")->capture_default_str();
  sub->add_option("--pp", a.trace.pp, "Traces: pipeline stages")->capture_default_str();
  sub->add_option("--steps", a.trace.steps, "Traces: training steps")->capture_default_str();
  sub->add_option("--microbatches", a.trace.microbatches, "Traces: micro-batches per step")
      ->capture_default_str();
  sub->add_option("--slow-rank", a.trace.slow_rank, "Traces: rank whose compute is slowed (-1: none)")
      ->capture_default_str();
  sub->add_option("--slow-factor", a.trace.slow_factor, "Traces: how much slower it computes")
      ->capture_default_str();
  sub->add_option("--slow-gap-ms", a.slow_gap_ms,
                  "Traces: milliseconds its host idles before each compute op (a stalled host)")
      ->capture_default_str();
}

void add_simulate_command(cli::Tool& tool) {
  auto a = std::make_shared<SimulateArgs>();
  CLI::App* sub = tool.add_subcommand(
      "simulate", "Write a simulated job's telemetry with a labelled fault, or traces with a slow worker",
      [a] { return run_simulate(*a); });
  sub->add_option("--out", a->out, "Output directory (telemetry/ or trace/ and labels inside)")
      ->required();
  sub->add_option("--machines", a->job.machines, "Machines (hosts)")->capture_default_str();
  sub->add_option("--ranks-per-machine", a->job.ranks_per_machine, "Ranks on each machine")
      ->capture_default_str();
  sub->add_option("--duration-s", a->job.duration_s, "Job length in seconds")->capture_default_str();
  sub->add_option("--fault", a->fault,
                  "none, slow-cpu, nic-degrade, machine-stop, thermal-throttle or memory-leak")
      ->capture_default_str();
  sub->add_option("--fault-machine", a->job.fault_machine, "Index of the faulty machine")
      ->capture_default_str();
  sub->add_option("--fault-start-s", a->job.fault_start_s, "Seconds into the job the fault starts")
      ->capture_default_str();
  sub->add_option("--severity", a->job.severity, "Strength of the fault's signature, (0, 1]")
      ->capture_default_str();
  sub->add_option("--seed", a->job.seed, "Random seed")->capture_default_str();
  add_trace_options(sub, *a);
}

}  // namespace

MS_CLI_COMMAND(simulate, add_simulate_command);

}  // namespace ms::diagnose_cmd
