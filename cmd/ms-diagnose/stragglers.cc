// `ms-diagnose stragglers <trace dir>`: what-if analysis of a job's per-rank traces (Lin et
// al., OSDI 2025; lib/diag/straggler.h): slowdown against an idealized replay, and how much of
// the waste each worker, stage and op type accounts for, with a per-worker heatmap; on
// pipeline-parallel traces also the measured pipeline bubble beside the schedule's theoretical one.
// Exit 3 when the slowdown reaches --min-slowdown, else 0.
#include "cmd/common/registry.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include "diag/straggler.h"
#include "diag/svg.h"
#include "io/atomic_file.h"
#include "io/env.h"
#include "telemetry/reader.h"

namespace ms::diagnose_cmd {
namespace {

struct StragglerArgs {
  std::string dir, svg, html;
  double min_slowdown = 1.1;
  bool json = false;
};

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

std::string what_if_lines(const char* title, std::vector<diag::WhatIf> list, size_t limit) {
  std::stable_sort(list.begin(), list.end(),
                   [](const auto& a, const auto& b) { return a.share > b.share; });
  std::string out = std::string(title) + ":\n";
  for (size_t i = 0; i < list.size() && i < limit; ++i) {
    out += "  " + list[i].name + format("  share %.3f  (span if fixed alone %.4f s)\n",
                                        list[i].share, list[i].fixed_s);
  }
  return out;
}

std::string summary_text(const diag::StragglerReport& r) {
  std::string out = "# ms-diagnose stragglers: " + std::to_string(r.ranks) + " ranks, " +
                    std::to_string(r.steps.size()) + " steps\n";
  out += format("measured %.4f s, replayed %.4f s (%+.2f%%)\n", r.measured_s, r.actual_s,
                100 * r.replay_error());
  out += format("ideal %.4f s: slowdown S = %.3f, waste %.4f s\n", r.ideal_s, r.slowdown, r.waste_s);
  out += what_if_lines("workers (fix only this rank)", r.workers, 8);
  out += what_if_lines("stages", r.stages, 8);
  out += what_if_lines("op types", r.ops, 8);
  out += diag::pipeline_bubble_text(r.pipeline);
  return out;
}

diag::Heatmap heatmap_of(const diag::StragglerReport& r) {
  diag::Heatmap h;
  h.title = "Per-worker slowdown: step time / step time with only that worker fixed";
  for (int rank = 0; rank < r.ranks; ++rank) h.row_labels.push_back("rank " + std::to_string(rank));
  for (int64_t s : r.steps) h.column_labels.push_back(std::to_string(s));
  h.values = r.heatmap;
  return h;
}

Result<int> run_stragglers(const StragglerArgs& args) {
  const std::string inner = args.dir + "/trace";
  const std::string dir = io::default_env().is_directory(inner) ? inner : args.dir;
  MS_ASSIGN_OR_RETURN(auto traces, telemetry::read_trace_dir(dir));
  MS_ASSIGN_OR_RETURN(diag::StragglerReport report, diag::analyze_stragglers(traces));
  const std::string text = summary_text(report);
  const std::string svg = diag::heatmap_svg(heatmap_of(report));
  if (!args.svg.empty()) MS_RETURN_IF_ERROR(io::write_file_atomic(args.svg, svg));
  if (!args.html.empty()) {
    MS_RETURN_IF_ERROR(io::write_file_atomic(
        args.html, diag::html_page("ms-diagnose stragglers: " + dir, text, svg)));
  }
  if (args.json) {
    std::cout << diag::straggler_report_json(report).dump(2) << std::endl;
  } else {
    std::fputs(text.c_str(), stdout);
  }
  return report.slowdown >= args.min_slowdown ? 3 : 0;
}

void add_stragglers_command(cli::Tool& tool) {
  auto a = std::make_shared<StragglerArgs>();
  CLI::App* sub = tool.add_subcommand(
      "stragglers", "What-if analysis of per-rank traces: slowdown and who causes it",
      [a] { return run_stragglers(*a); });
  sub->add_option("dir", a->dir, "Trace directory (or a run directory holding trace/)")->required();
  sub->add_option("--svg", a->svg, "Write the per-worker slowdown heatmap as SVG");
  sub->add_option("--html", a->html, "Write the summary and heatmap as one HTML page");
  sub->add_option("--min-slowdown", a->min_slowdown, "Exit 3 when the slowdown reaches this")
      ->capture_default_str();
  cli::add_json_flag(sub, &a->json);
}

}  // namespace

MS_CLI_COMMAND(stragglers, add_stragglers_command);

}  // namespace ms::diagnose_cmd
