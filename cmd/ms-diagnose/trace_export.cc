// `ms-diagnose trace-export <trace dir> -o trace.json`: converts a run's per-rank traces (clock
// offsets applied) into one Chrome trace-event file for Perfetto or chrome://tracing.
#include "cmd/common/registry.h"

#include <iostream>
#include <memory>

#include "io/atomic_file.h"
#include "telemetry/chrome_trace.h"
#include "telemetry/reader.h"

namespace ms::diagnose_cmd {
namespace {

struct TraceExportCli {
  std::string dir;
  std::string output;
  std::string group_by = "rank";
};

Result<int> run_trace_export(const TraceExportCli& cli) {
  MS_ASSIGN_OR_RETURN(telemetry::GroupBy group_by, telemetry::parse_group_by(cli.group_by));
  MS_ASSIGN_OR_RETURN(std::vector<std::vector<telemetry::TraceEvent>> ranks,
                      telemetry::read_trace_dir(cli.dir));
  size_t events = 0;
  for (const auto& r : ranks) events += r.size();
  MS_RETURN_IF_ERROR(io::write_file_atomic(cli.output, telemetry::export_chrome_trace(ranks, group_by)));
  std::cout << "wrote " << events << " events of " << ranks.size() << " rank(s) to " << cli.output
            << " (open it in ui.perfetto.dev)" << std::endl;
  return 0;
}

void add_trace_export_command(cli::Tool& tool) {
  auto cli = std::make_shared<TraceExportCli>();
  CLI::App* sub = tool.add_subcommand(
      "trace-export", "Convert a run's per-rank traces into one Chrome/Perfetto trace JSON file",
      [cli] { return run_trace_export(*cli); });
  sub->add_option("dir", cli->dir, "Trace directory (<run>/trace) holding rank-*.jsonl")->required();
  sub->add_option("-o,--output", cli->output, "Output JSON file")->required();
  sub->add_option("--group-by", cli->group_by,
                  "One process row per rank, or per host with a thread row per rank")
      ->capture_default_str()->check(CLI::IsMember({"rank", "host"}));
}

}  // namespace

MS_CLI_COMMAND(trace_export, add_trace_export_command);

}  // namespace ms::diagnose_cmd
