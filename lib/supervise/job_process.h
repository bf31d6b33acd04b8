// The supervised job as a process tree: started in a session of its own, its terminal output
// copied to a log file (and, optionally, to ours) by a reader thread, and ended by signals.
// mpirun gives each local rank a process group of its own, so ending the job cannot rely on
// process groups: end() signals the launcher, waits, and then kills every process left in the
// job's session (found in /proc), so no rank outlives the job on this machine. The job also ends
// when the supervisor dies: the launcher gets SIGTERM then (PR_SET_PDEATHSIG), which mpirun and
// srun pass on to every rank.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"

namespace ms::supervise {

class JobProcess {
 public:
  // Starts argv[0] (looked up in PATH) with `env` added to ours. Output goes to `log_path`
  // (created or truncated) and, with `echo`, to our stdout. IOError / Internal naming the
  // command when it cannot start. The parent-death signal follows the calling thread, not the
  // process: call from a thread that lives as long as the job (the supervisor's main thread).
  static Result<std::unique_ptr<JobProcess>> start(const std::vector<std::string>& argv,
                                                   const std::map<std::string, std::string>& env,
                                                   const std::string& log_path, bool echo);
  ~JobProcess();
  JobProcess(const JobProcess&) = delete;
  JobProcess& operator=(const JobProcess&) = delete;

  // The exit status once the launcher has exited (its code, or 128 + the signal), else nullopt.
  std::optional<int> poll();
  // Sends `signal` to the launcher.
  void signal(int signal);
  // Ends the job: `first` to the launcher (SIGTERM, or SIGUSR1, which makes ms-train save and
  // stop, through mpirun or srun) and up to `grace_s` seconds for it to exit; then, when
  // `first` was not SIGTERM, SIGTERM and up to kTerminateWaitS more; then SIGKILL to every
  // process of the job's session. Returns the launcher's exit status.
  int end(double grace_s, int first);
  // How long a launcher sent SIGTERM by end() gets to end its ranks before it is killed.
  static constexpr double kTerminateWaitS = 30;
  // What the job has printed so far.
  std::string output() const;
  pid_t pid() const { return pid_; }

 private:
  JobProcess() = default;
  void read_output(int fd, bool echo);
  // Up to `seconds` for the launcher to exit; whether it has.
  bool wait_for_exit(double seconds);
  // Sends `signal` to every live process of the job's session; how many there were.
  int signal_session(int signal) const;
  void kill_session();

  pid_t pid_ = -1;
  std::optional<int> status_;
  std::thread reader_;
  mutable std::mutex mutex_;
  std::string output_;
  int log_fd_ = -1;
};

}  // namespace ms::supervise
