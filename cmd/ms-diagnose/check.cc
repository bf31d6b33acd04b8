// `ms-diagnose check`: node health check run under mpirun (a single process works too). Measures
// every rank's sgemm rate (and cuBLAS rate where a GPU exists) and STREAM triad bandwidth, runs
// nccl-tests-style collective benchmarks with exact verification, a pairwise point-to-point
// matrix, and gives a verdict per machine. Exit 0 healthy, 3 when a suspect is found, a
// collective result is wrong or a collective's best busbw is below --min-busbw. Under
// Slurm a machine is named by its Slurm node name (diag/nodes.h), and --suspects-file writes the
// suspect nodes as the comma list `sbatch --exclude` takes.
#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "comm/agree.h"
#include "comm/mpi_communicator.h"
#include "core/logging.h"
#include "diag/check.h"
#include "diag/check_nccl.h"
#include "diag/check_report.h"
#include "diag/nodes.h"

namespace ms::diagnose_cmd {
namespace {

constexpr int kSuspectExit = 3;

struct CheckCli {
  diag::CheckOptions check;
  diag::HealthOptions health;
  std::vector<std::string> collectives;
  std::string group_by = "host";
  std::string suspects_file;
  bool json = false;
  bool nccl = false;
};

Status resolve_options(CheckCli& cli) {
  if (!cli.collectives.empty()) {
    cli.check.collectives.clear();
    for (const std::string& name : cli.collectives) {
      MS_ASSIGN_OR_RETURN(diag::Collective c, diag::parse_collective(name));
      cli.check.collectives.push_back(c);
    }
  }
  MS_ASSIGN_OR_RETURN(cli.health.group_by, telemetry::parse_group_by(cli.group_by));
  if (cli.check.injection.rank >= 0 && !(cli.check.injection.factor >= 1)) {
    return InvalidArgument("--inject-factor must be >= 1");
  }
  return Status::OK();
}

// The suspect nodes, one comma list and a newline (just the newline when healthy), so a batch
// script can pass them to `sbatch --exclude`.
Status write_suspects_file(const std::string& path, const diag::CheckVerdict& verdict) {
  std::ofstream out(path, std::ios::trunc);
  out << diag::node_list(verdict.suspect_nodes) << "\n";
  out.close();
  if (!out) return IOError("cannot write the suspect list to " + path + " (--suspects-file)");
  return Status::OK();
}

Result<int> check_world(comm::MpiCommunicator& world, CheckCli& cli) {
  MS_RETURN_IF_ERROR(comm::agree(world, resolve_options(cli), "reading the options"));
  MS_ASSIGN_OR_RETURN(
      diag::CheckResults results,
      diag::run_check(world, diag::machine_name_from_env(log::host()), cli.check));
  if (cli.nccl) {
    // No GPU or no NCCL in this build: a named skip line, and the MPI results still stand.
    Result<std::vector<std::vector<diag::CollectiveResult>>> nccl =
        diag::run_nccl_collectives(world, cli.check);
    if (nccl.ok()) {
      results.nccl_collectives = std::move(*nccl);
    } else if (nccl.status().code() == StatusCode::kUnavailable) {
      results.nccl_skipped = nccl.status().message();
    } else {
      return nccl.status();
    }
  }
  const diag::CheckVerdict verdict = diag::judge_check(results, cli.check, cli.health);
  if (world.rank() == 0 && !cli.suspects_file.empty()) {
    MS_RETURN_IF_ERROR(write_suspects_file(cli.suspects_file, verdict));
  }
  if (world.rank() == 0) {
    if (cli.json) {
      std::cout << diag::check_report_json(results, cli.check, cli.health, verdict).dump(2)
                << std::endl;
    } else {
      std::fputs(diag::format_check_report(results, cli.check, verdict).c_str(), stdout);
      std::fflush(stdout);
    }
  }
  return verdict.healthy() ? 0 : kSuspectExit;
}

Result<int> run_check(CheckCli cli) {
  return cli::run_in_world(
      [&](comm::MpiCommunicator& world) { return check_world(world, cli); });
}

void add_sweep_options(CLI::App* sub, CheckCli& cli) {
  diag::CheckOptions& o = cli.check;
  sub->add_option("--min-bytes", o.min_bytes, "Smallest collective size in bytes")->capture_default_str();
  sub->add_option("--max-bytes", o.max_bytes, "Largest collective size in bytes")->capture_default_str();
  sub->add_option("--factor", o.factor, "Multiplier between sizes")->capture_default_str();
  sub->add_option("--iters", o.iters, "Timed iterations per size")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--warmup", o.warmup, "Untimed iterations per size")
      ->capture_default_str()
      ->check(cli::kNonNegativeNumber);
  sub->add_option("--min-busbw", o.min_busbw_gbs,
                  "Exit 3 when a collective's best bus bandwidth over the sweep (GB/s) is below "
                  "this (0: not judged)")
      ->capture_default_str()
      ->check(cli::kNonNegativeNumber);
  sub->add_flag("--nccl", cli.nccl,
                "Also run the collectives over NCCL on GPU buffers, one rank per GPU (a named "
                "skip line where there is no GPU or no NCCL)");
  sub->add_option("--collectives", cli.collectives,
                  "Which collectives (default all): allreduce allgather reduce_scatter alltoall "
                  "broadcast sendrecv");
}

void add_rank_options(CLI::App* sub, CheckCli& cli) {
  diag::CheckOptions& o = cli.check;
  sub->add_option("--sgemm-n", o.sgemm_n, "Matrix size of the CPU sgemm benchmark")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--gpu-sgemm-n", o.gpu.sgemm_n,
                  "Matrix size of the GPU fp32 GEMM benchmark (0 skips it; ignored without CUDA)")
      ->capture_default_str()
      ->check(cli::kNonNegativeNumber);
  sub->add_option("--gpu-bf16-n", o.gpu.bf16_n,
                  "Matrix size of the GPU bf16 GEMM benchmark (0 skips it; ignored without CUDA)")
      ->capture_default_str()
      ->check(cli::kNonNegativeNumber);
  sub->add_flag("!--no-gpu-health", o.gpu_health,
                "Do not judge each rank's GPU with the NVML rules of gpu-health");
  sub->add_option("--gpu-bytes", o.gpu.bytes,
                  "Buffer bytes of the GPU read, copy and host transfer benchmarks (0 skips "
                  "them; ignored without CUDA)")
      ->capture_default_str();
  sub->add_option("--triad-elements", o.triad_elements, "Doubles per STREAM triad array")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--reps", o.compute_reps, "Repetitions of each per-rank benchmark (best kept)")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--rounds", o.rounds,
                  "Round-robin passes over the ranks and pairs, and timed passes of each "
                  "collective size (each keeps its best)")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--p2p-bytes", o.p2p_bytes, "Message size of the point-to-point matrix")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--p2p-reps", o.p2p_reps, "Messages per ordered pair")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
}

void add_verdict_options(CLI::App* sub, CheckCli& cli) {
  sub->add_option("--z-threshold", cli.health.z_threshold,
                  "Robust z-score below -this makes a statistical outlier")->capture_default_str();
  sub->add_option("--min-degradation", cli.health.min_degradation,
                  "Fraction below the median that makes an outlier a suspect")
      ->capture_default_str();
  sub->add_option("--group-by", cli.group_by, "What a machine is: host or rank")
      ->capture_default_str()->check(CLI::IsMember({"host", "rank"}));
  sub->add_option("--inject-slow-rank", cli.check.injection.rank,
                  "Testing aid: pretend this rank is slower (its timings are multiplied)");
  sub->add_option("--inject-factor", cli.check.injection.factor,
                  "Testing aid: slowdown factor of --inject-slow-rank")->capture_default_str();
  sub->add_option("--suspects-file", cli.suspects_file,
                  "Also write the suspect machines (Slurm node names under Slurm) to this file as "
                  "one comma list for `sbatch --exclude`; an empty line when healthy");
  cli::add_json_flag(sub, &cli.json);
}

void add_check_command(cli::Tool& tool) {
  auto cli = std::make_shared<CheckCli>();
  CLI::App* sub = tool.add_subcommand(
      "check",
      "Benchmark compute, memory, collectives and links of every rank and name slow machines "
      "(exit 3 when a suspect is found)",
      [cli] { return run_check(*cli); });
  add_sweep_options(sub, *cli);
  add_rank_options(sub, *cli);
  add_verdict_options(sub, *cli);
}

}  // namespace

MS_CLI_COMMAND(check, add_check_command);

}  // namespace ms::diagnose_cmd
