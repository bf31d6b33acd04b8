// `ms-diagnose supervise [options] -- <job command>`: runs an mpirun or srun line running
// ms-train and recovers it by itself from crashes, hangs, slow and faulty machines and
// non-finite losses (lib/supervise/supervisor.h, docs/supervise.md). Exit 0 when the job
// completed every step, 1 when the recovery policy or a signal stopped it.
#include "cmd/common/registry.h"

#include <memory>

#include "supervise/supervisor.h"

namespace ms::diagnose_cmd {
namespace {

void add_supervise_command(cli::Tool& tool) {
  auto opts = std::make_shared<supervise::SuperviseOptions>();
  CLI::App* sub = tool.add_subcommand(
      "supervise",
      "Run a training job (`-- mpirun -np {np} ms-train --config ...`) and recover it from "
      "crashed, hung, slow and faulty machines and non-finite losses: evict, restart from the "
      "newest checkpoint, report ETTR (exit 0: completed, 1: stopped)",
      [opts] { return supervise::supervise(*opts); });
  sub->add_option("command", opts->command,
                  "The job command after `--`; {np} is replaced by the rank count and "
                  "{hostfile} by the hostfile of the machines in use")
      ->required()
      ->expected(-1);
  sub->add_option("--ranks", opts->ranks,
                  "One machine: the number of rank slots, each treated as a machine that can "
                  "be excluded")
      ->check(cli::kPositiveNumber);
  sub->add_option("--hostfile", opts->hostfile,
                  "The machines, as an OpenMPI hostfile (host [slots=N] a line)")
      ->check(CLI::ExistingFile);
  sub->add_option("--state-dir", opts->state_dir,
                  "Event log, hostfile, exclusion list, attempt logs and evidence (default: "
                  "run.dir/supervise)");
  sub->add_option("--max-evictions", opts->policy.max_evictions,
                  "Machines that may be removed without a second signal")
      ->capture_default_str()
      ->check(cli::kNonNegativeNumber);
  sub->add_option("--max-restarts", opts->policy.max_restarts, "Restarts before giving up")
      ->capture_default_str()
      ->check(cli::kNonNegativeNumber);
  sub->add_option("--hang-timeout", opts->hang_timeout_s,
                  "Seconds without a completed step that make a hang (the ranks' watchdog "
                  "reports after half of it)")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--start-timeout", opts->start_timeout_s,
                  "The same before an attempt's first step (start-up and checkpoint load)")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--detect-window", opts->detect_window_s,
                  "Seconds in each window of the live detection of slow and faulty machines")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--detect-period", opts->detect_period_s,
                  "Seconds one machine must stand out before it is called slow or faulty")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--detect-every", opts->detect_every_s, "Seconds between detection passes")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--min-slowdown", opts->min_slowdown,
                  "A slow machine is acted on when its step compute is at least this fraction "
                  "slower than the others'")
      ->capture_default_str()
      ->check(cli::kNonNegativeNumber);
  sub->add_option("--stop-grace", opts->stop_grace_s,
                  "Seconds a job asked to stop (SIGUSR1: it saves a checkpoint first) gets "
                  "before SIGTERM (then 30 s before it is killed); also the longest wait for "
                  "an earlier job's ranks to free run.dir/train.lock before an attempt")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_option("--poll", opts->poll_s, "Seconds between looks at the job")
      ->capture_default_str()
      ->check(cli::kPositiveNumber);
  sub->add_flag("!--quiet", opts->echo, "Do not copy the job's output to stdout");
}

}  // namespace

MS_CLI_COMMAND(supervise, add_supervise_command);

}  // namespace ms::diagnose_cmd
