// `ms-diagnose supervise`: runs a training job and brings it back by itself from the faults of
// production runs, as MegaScale and ByteRobust describe: a crashed rank (the launcher's exit), a
// hang (no rank finishes a step for --hang-timeout; the watchdog's in-flight reports name the
// rank the others wait for), a slow or faulty machine (Minder-style detection on the live
// telemetry), and a non-finite loss. For each it keeps the evidence, ends the job, removes the
// suspected machine (recovery_policy.h says when) and restarts it with checkpoint.resume=auto
// on the machines left, at the same global batch. The event log and the end-of-run report give
// the effective training time ratio and the time to recover from each fault. docs/supervise.md
// is the user's guide.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "supervise/recovery_policy.h"

namespace ms::supervise {

struct SuperviseOptions {
  std::vector<std::string> command;  // the job command with {np} (and {hostfile})
  int ranks = 0;                     // one machine: rank slots (--ranks)
  std::string hostfile;              // or the machines, as an OpenMPI hostfile
  std::string state_dir;             // empty: run.dir/supervise
  PolicyOptions policy;
  double hang_timeout_s = 300;  // no step completed by any rank for this long: a hang
  double start_timeout_s = 900;  // the same before an attempt's first step
  double poll_s = 0.5;
  double detect_window_s = 60;  // detect's window and continuity period
  double detect_period_s = 60;
  double detect_every_s = 10;
  double min_slowdown = 0.2;  // a slow machine is acted on when its compute is this much slower
  double stop_grace_s = 120;  // for the job to save and stop (SIGUSR1) before it is killed
  bool echo = true;           // copy the job's output to stdout
};

// Supervises until the job completes (0) or is stopped by the policy or a signal (1). Errors:
// a job command or config the supervisor cannot use, an unwritable state directory.
Result<int> supervise(const SuperviseOptions& options);

// Waits up to `timeout_s` for the run directory's training lock (train.lock) to be free; the
// supervisor calls it before every attempt. An ended attempt's ranks can outlive its launcher
// for a while (srun's under slurmstepd, remote ranks under any launcher), as can those of a
// supervisor killed just before this one started, and the attempt's rank 0 would be refused
// the directory: a crash that is nobody's fault, which would cost a healthy machine.
// FailedPrecondition naming the holder when it stays held; IOError when the lock file cannot
// be opened.
Status wait_for_run_dir_release(const std::string& run_dir, double timeout_s);

}  // namespace ms::supervise
