// `ms-diagnose hang <run dir | inflight dir>`: reads the watchdog's in-flight reports, groups
// ranks by the operation they wait in, and names the outlier ranks with their mesh coordinates
// and stacks. Exit 0 when there is no hang evidence, 3 when outliers are named.
#include "cmd/common/registry.h"

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "config/run_config.h"
#include "diag/hang.h"
#include "io/env.h"

namespace ms::diagnose_cmd {
namespace {

constexpr int kOutliersExit = 3;

struct HangCli {
  std::string dir;
  std::string mesh;
  bool json = false;
};

// The run's config.resolved.yaml, beside the inflight directory or in `dir` itself.
std::optional<std::string> resolved_config(const std::string& dir) {
  io::Env& env = io::default_env();
  for (const std::string& base : {dir, io::parent_dir(dir)}) {
    const std::string path = base + "/config.resolved.yaml";
    if (env.exists(path)) return path;
  }
  return std::nullopt;
}

// The mesh from --mesh, else from the run's resolved config; nullopt when neither is there.
Result<std::optional<comm::MeshLayout>> mesh_layout(const HangCli& cli) {
  comm::MeshShape shape;
  if (!cli.mesh.empty()) {
    MS_ASSIGN_OR_RETURN(shape, diag::parse_mesh_shape(cli.mesh));
  } else if (std::optional<std::string> path = resolved_config(cli.dir)) {
    MS_ASSIGN_OR_RETURN(config::RunConfig config, config::load_run_config(*path, {}));
    shape.pp = static_cast<int>(config.parallel.pp);
    shape.dp = static_cast<int>(config.parallel.dp);
    shape.tp = static_cast<int>(config.parallel.tp);
  } else {
    return std::optional<comm::MeshLayout>();
  }
  MS_ASSIGN_OR_RETURN(comm::MeshLayout layout,
                      comm::MeshLayout::create(shape, shape.world_size()));
  return std::optional<comm::MeshLayout>(layout);
}

nlohmann::ordered_json analysis_json(const diag::HangAnalysis& a,
                                     const std::vector<diag::InflightReport>& reports,
                                     const comm::MeshLayout* layout) {
  nlohmann::ordered_json doc;
  doc["reports"] = reports.size();
  doc["groups"] = nlohmann::ordered_json::array();
  for (const diag::WaitGroup& g : a.groups) {
    doc["groups"].push_back({{"op", g.op}, {"group", g.group}, {"seq", g.seq},
                             {"group_ranks", g.group_ranks}, {"ranks", g.ranks},
                             {"max_waiting_s", g.max_waiting_s}});
  }
  doc["outliers"] = nlohmann::ordered_json::array();
  for (const diag::HangOutlier& o : a.outliers) {
    nlohmann::ordered_json j{{"rank", o.rank}, {"kind", diag::outlier_kind_name(o.kind)},
                             {"mesh", diag::mesh_label(layout, o.rank)},
                             {"explanation", o.explanation}};
    if (o.report >= 0) {
      j["host"] = reports[o.report].host;
      j["stack"] = reports[o.report].stack;
    }
    doc["outliers"].push_back(std::move(j));
  }
  return doc;
}

Result<int> run_hang(const HangCli& cli) {
  MS_ASSIGN_OR_RETURN(std::vector<diag::InflightReport> reports,
                      diag::read_inflight_reports(cli.dir));
  MS_ASSIGN_OR_RETURN(std::optional<comm::MeshLayout> layout, mesh_layout(cli));
  const comm::MeshLayout* mesh = layout ? &*layout : nullptr;
  const diag::HangAnalysis analysis = diag::analyze_hang(reports);
  if (cli.json) {
    std::cout << analysis_json(analysis, reports, mesh).dump(2) << std::endl;
  } else {
    std::cout << diag::format_hang_report(analysis, reports, mesh) << std::flush;
  }
  return analysis.outliers.empty() ? 0 : kOutliersExit;
}

void add_hang_command(cli::Tool& tool) {
  auto cli = std::make_shared<HangCli>();
  CLI::App* sub = tool.add_subcommand(
      "hang",
      "Group ranks by the operation the watchdog found them blocked in and name the outliers "
      "(exit 3 when there are some)",
      [cli] { return run_hang(*cli); });
  sub->add_option("dir", cli->dir, "Run directory, or its inflight/ directory")->required();
  sub->add_option("--mesh", cli->mesh,
                  "Mesh shape such as pp=1,dp=2,tp=2 (default: the run's config.resolved.yaml)");
  cli::add_json_flag(sub, &cli->json);
}

}  // namespace

MS_CLI_COMMAND(hang, add_hang_command);

}  // namespace ms::diagnose_cmd
