// ms-train plan: chooses the parallel layout before a job runs (lib/plan, docs/plan.md).
//   ms-train plan --config run.yaml --cluster configs/clusters/h100-8x.yaml [--top 5] [--json]
//                 [--what-if net=0.5,compute=2] [--ranks N] [--check-json check.json]
//   ms-train plan --config run.yaml --cluster c.yaml --evaluate   (the config's own layout)
//   ms-train plan --config run.yaml --cluster c.yaml --validate 10 [--validate-top 3]
//                 [--validate-launcher "mpirun --oversubscribe -np {ranks}"]
//   mpirun -np 2 ms-train plan --profile cpu.yaml [--config run.yaml --profile-ranks 4]
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"
#include "cmd/ms-train/plan_validate.h"
#include "config/run_config.h"
#include "io/atomic_file.h"
#include "io/output_path.h"
#include "plan/cluster.h"
#include "plan/profile.h"
#include "plan/report.h"
#include "plan/search.h"

namespace {

struct PlanOptions {
  std::string config_path;
  std::vector<std::string> sets;
  std::string cluster_path;
  std::string check_json;
  std::string what_if;
  std::string profile_path;
  std::string profile_name = "cpu-2core";
  int profile_ranks = 4;
  int ranks = 0;
  int top = 5;
  int64_t validate_steps = 0;
  int validate_top = 3;
  std::string validate_launcher = "mpirun -np {ranks}";
  std::string validate_dir;
  bool evaluate = false;
  bool json = false;
  bool replace = false;
};

ms::Result<int> profile(const PlanOptions& opts) {
  // Checked before minutes of measuring, and written atomically after.
  MS_RETURN_IF_ERROR(ms::io::check_output_file(
      ms::io::default_env(), opts.profile_path,
      {{opts.config_path, opts.cluster_path, opts.check_json}, "--profile", opts.replace}));
  ms::config::RunConfig config;
  const bool with_config = !opts.config_path.empty();
  if (with_config) {
    MS_ASSIGN_OR_RETURN(config, ms::config::load_run_config(opts.config_path, opts.sets));
  }
  return ms::cli::run_in_world([&](ms::comm::MpiCommunicator& world) -> ms::Result<int> {
    ms::plan::ProfileOptions options;
    options.name = opts.profile_name;
    options.config = with_config ? &config : nullptr;
    options.plan_ranks = opts.profile_ranks;
    MS_ASSIGN_OR_RETURN(const ms::plan::Cluster cluster, ms::plan::measure_cluster(world, options));
    if (world.rank() != 0) return 0;
    const std::string header =
        "# Measured on this machine by `ms-train plan --profile` (" + std::to_string(world.size()) +
        " ranks" + (with_config ? ", op shapes of " + opts.config_path : std::string()) +
        "); docs/plan.md describes every key.\n";
    MS_RETURN_IF_ERROR(ms::io::write_file_atomic(opts.profile_path,
                                                 header + ms::plan::cluster_to_yaml(cluster)));
    std::cout << "wrote " << opts.profile_path << ": sgemm peak "
              << cluster.device.peak_tflops.at("f32") * 1e3 << " GFLOP/s, triad "
              << cluster.device.memory_bandwidth_gbs << " GB/s, link "
              << cluster.intra_node.bandwidth_gbs << " GB/s busbw, "
              << cluster.intra_node.latency_us << " us, " << cluster.device.measured.size()
              << " op shapes; timing spread " << cluster.profile.spread * 100
              << "%, other processes took " << cluster.profile.load_share * 100
              << "% of the CPU (" << cluster.profile.repeated << " timings repeated)\n";
    if (cluster.disturbed()) std::cout << ms::plan::disturbed_note(cluster) << "\n";
    return 0;
  });
}

ms::Result<int> evaluate(const PlanOptions& opts, const ms::plan::PlanContext& ctx,
                         ms::plan::Scaling scaling) {
  MS_ASSIGN_OR_RETURN(const ms::plan::Layout layout, ms::plan::layout_of(*ctx.config, ctx.world));
  MS_ASSIGN_OR_RETURN(
      const ms::plan::Prediction p,
      ms::plan::predict_layout(*ctx.cluster, *ctx.config, layout, ctx.world, scaling));
  if (opts.json) {
    std::cout << ms::plan::prediction_json(p).dump(2) << "\n";
    return 0;
  }
  std::cout << "# ms-train plan --evaluate: " << ctx.config_path << " on " << ctx.cluster->name
            << ", " << ctx.world << " ranks\n"
            << ms::plan::prediction_row_header() << ms::plan::prediction_row(1, p);
  if (p.disturbed_profile) std::cout << ms::plan::disturbed_note(*ctx.cluster) << "\n";
  for (const ms::plan::RankMemory& m : p.memory) {
    std::printf(
        "# pp rank %d: %.2f MiB = weights %.2f + gradients %.2f + optimizer %.2f + "
        "activations %.2f + runtime %.2f\n",
        m.pp_rank, m.total_mib(), m.weights_mib, m.gradients_mib, m.optimizer_mib,
        m.activations_mib, m.overhead_mib);
  }
  return 0;
}

ms::Result<int> plan(const PlanOptions& opts) {
  if (!opts.profile_path.empty()) return profile(opts);
  if (opts.config_path.empty())
    return ms::InvalidArgument("no run config given: pass --config <file.yaml>");
  if (opts.cluster_path.empty()) {
    return ms::InvalidArgument(
        "no cluster file given: pass --cluster <file.yaml> (configs/clusters/ "
        "has CPU, H100 and H200 profiles; `ms-train plan --profile` measures one)");
  }
  MS_ASSIGN_OR_RETURN(const ms::config::RunConfig config,
                      ms::config::load_run_config(opts.config_path, opts.sets));
  MS_ASSIGN_OR_RETURN(ms::plan::Cluster cluster, ms::plan::load_cluster(opts.cluster_path));
  if (!opts.check_json.empty()) {
    MS_RETURN_IF_ERROR(ms::plan::apply_diagnose_check(opts.check_json, cluster));
  }
  ms::plan::Scaling scaling;
  if (!opts.what_if.empty()) {
    MS_ASSIGN_OR_RETURN(scaling, ms::plan::parse_what_if(opts.what_if));
  }
  const ms::plan::PlanContext ctx{opts.config_path, &cluster, &config,
                                  opts.ranks > 0 ? opts.ranks : cluster.ranks};
  if (opts.evaluate) return evaluate(opts, ctx, scaling);
  MS_ASSIGN_OR_RETURN(
      const ms::plan::SearchResult result,
      ms::plan::search_layouts(cluster, config, ctx.world, {}, static_cast<size_t>(opts.top)));
  std::optional<ms::plan::WhatIf> what_if;
  if (!opts.what_if.empty()) {
    MS_ASSIGN_OR_RETURN(const ms::plan::SearchResult scaled,
                        ms::plan::search_layouts(cluster, config, ctx.world, scaling, 1));
    what_if = ms::plan::WhatIf{scaling, result.ranked.front(), {}, scaled.ranked.front()};
    MS_ASSIGN_OR_RETURN(what_if->same_layout,
                        ms::plan::predict_layout(cluster, config, result.ranked.front().layout,
                                                 ctx.world, scaling));
  }
  const ms::plan::WhatIf* w = what_if ? &*what_if : nullptr;
  std::vector<ms::plan::ValidatedLayout> validated;
  if (opts.validate_steps > 0) {
    // Candidates from the whole ranked list, not only the --top shown.
    MS_ASSIGN_OR_RETURN(const ms::plan::SearchResult all,
                        ms::plan::search_layouts(cluster, config, ctx.world));
    const ms::cli::ValidateOptions v{opts.validate_steps, static_cast<size_t>(opts.validate_top),
                                     opts.validate_launcher, opts.validate_dir, opts.config_path,
                                     opts.sets, ctx.world};
    MS_ASSIGN_OR_RETURN(validated, ms::cli::validate_layouts(v, all));
  }
  if (opts.json) {
    nlohmann::ordered_json doc = ms::plan::plan_json(ctx, result, w);
    if (!validated.empty()) {
      doc["validation"] = ms::plan::validation_json(validated, opts.validate_steps);
    }
    std::cout << doc.dump(2) << "\n";
  } else {
    std::cout << ms::plan::plan_text(ctx, result, w);
    if (!validated.empty()) {
      std::cout << ms::plan::validation_text(validated, opts.validate_steps);
    }
  }
  return 0;
}

void add_plan(ms::cli::Tool& tool) {
  auto opts = std::make_shared<PlanOptions>();
  CLI::App* cmd = tool.add_subcommand(
      "plan",
      "Choose the parallel layout before the job runs: search every layout the trainer accepts "
      "on a cluster file's ranks under its memory limit, with predicted step time, MFU and "
      "memory per rank (docs/plan.md)",
      [opts] { return plan(*opts); });
  ms::cli::add_config_options(cmd, &opts->config_path, &opts->sets);
  cmd->add_option("--cluster", opts->cluster_path,
                  "Cluster file: ranks, ranks per node, memory per rank and the device profile "
                  "(configs/clusters/)");
  cmd->add_option("--ranks", opts->ranks, "Plan for this many ranks instead of the cluster's")
      ->check(ms::cli::kPositiveNumber);
  cmd->add_option("--top", opts->top, "How many layouts to list (default 5)")
      ->check(ms::cli::kPositiveNumber);
  cmd->add_flag("--evaluate", opts->evaluate,
                "Predict the config's own layout (parallel.*, --set) instead of searching");
  cmd->add_option("--what-if", opts->what_if,
                  "Scale link or compute speed, e.g. net=0.5,compute=2: reports the step-time "
                  "change of the best layout and the best layout then");
  cmd->add_option("--validate", opts->validate_steps,
                  "Train the top candidates (the recommendation first) for this many steps on "
                  "the planned ranks and report which was fastest measured")
      ->check(ms::cli::kPositiveNumber);
  cmd->add_option("--validate-top", opts->validate_top,
                  "With --validate: how many candidates of distinct shape to train (default 3)")
      ->check(ms::cli::kPositiveNumber);
  cmd->add_option("--validate-launcher", opts->validate_launcher,
                  "With --validate: the launcher, {ranks} standing for the rank count (default "
                  "\"mpirun -np {ranks}\")");
  cmd->add_option("--validate-dir", opts->validate_dir,
                  "With --validate: where the runs' directories go (default /tmp)");
  cmd->add_option("--check-json", opts->check_json,
                  "Take the link bandwidth and latency from `ms-diagnose check --json` output");
  cmd->add_option("--profile", opts->profile_path,
                  "Measure this machine and write a cluster file to the path (run under "
                  "mpirun -np 2 or more); with --config also the op shapes of that model");
  cmd->add_option("--profile-ranks", opts->profile_ranks,
                  "With --profile --config: collect op shapes for 1 to this many ranks (default 4)")
      ->check(ms::cli::kPositiveNumber);
  cmd->add_option("--profile-name", opts->profile_name, "With --profile: the cluster's name");
  cmd->add_flag("--replace", opts->replace, "With --profile: replace an existing cluster file");
  ms::cli::add_json_flag(cmd, &opts->json);
}

}  // namespace

MS_CLI_COMMAND(plan, add_plan);
