#include "supervise/job_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/logging.h"

extern char** environ;

namespace ms::supervise {
namespace {

// The session id of process `pid` (field 6 of /proc/<pid>/stat), or -1; -1 too for a zombie,
// which holds no files (and so no locks) any more.
pid_t session_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return -1;
  char state = 0;
  long long ppid = 0, pgrp = 0, session = 0;
  if (std::sscanf(text.c_str() + close + 1, " %c %lld %lld %lld", &state, &ppid, &pgrp,
                  &session) != 4 || state == 'Z') {
    return -1;
  }
  return static_cast<pid_t>(session);
}

// In the forked child: the job gets SIGTERM when the supervisor dies, even by SIGKILL, so no
// job outlives its supervisor to race a rerun's on the same run directory. SIGTERM because
// mpirun (and srun) forward it to every rank and end the job, and ms-train run directly saves
// and stops on it. A supervisor that died before prctl took effect left the child to init (or
// a subreaper): then the parent is no longer `supervisor` and the job must not start. The
// kernel sends the signal when the forking *thread* ends, so start() must run on a thread that
// lives as long as the supervisor (Supervisor calls it from its own loop, on the main thread).
void end_with_parent(pid_t supervisor) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != supervisor) ::_exit(127);
}

int decode(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace

Result<std::unique_ptr<JobProcess>> JobProcess::start(
    const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
    const std::string& log_path, bool echo) {
  if (argv.empty()) return InvalidArgument("empty job command");
  std::unique_ptr<JobProcess> job(new JobProcess());
  job->log_fd_ = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (job->log_fd_ < 0) return IOError("cannot create " + log_path + ": " + std::strerror(errno));
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + std::strerror(errno));
  // Everything the child needs is prepared before fork: only async-signal-safe calls after it.
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (env.count(entry.substr(0, entry.find('='))) == 0) env_text.push_back(entry);
  }
  for (const auto& [key, value] : env) env_text.push_back(key + "=" + value);
  std::vector<char*> envp, args;
  for (std::string& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t supervisor = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Internal(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    end_with_parent(supervisor);
    ::setsid();
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    const int null_in = ::open("/dev/null", O_RDONLY);
    if (null_in >= 0) ::dup2(null_in, STDIN_FILENO);
    ::execvpe(args[0], args.data(), envp.data());
    const char message[] = "ms-diagnose supervise: cannot run the job command\n";
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, message, sizeof(message) - 1);
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  job->pid_ = pid;
  job->reader_ = std::thread([raw = job.get(), fd = pipe_fds[0], echo] { raw->read_output(fd, echo); });
  return job;
}

void JobProcess::read_output(int fd, bool echo) {
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const size_t size = static_cast<size_t>(n);
    [[maybe_unused]] ssize_t w = ::write(log_fd_, buffer, size);
    if (echo) {
      [[maybe_unused]] ssize_t e = ::write(STDOUT_FILENO, buffer, size);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    output_.append(buffer, size);
    // Keep the last 4 MiB: the evidence is in the tail, and a long job prints a lot.
    if (output_.size() > (size_t{8} << 20)) output_.erase(0, output_.size() - (size_t{4} << 20));
  }
  ::close(fd);
}

JobProcess::~JobProcess() {
  if (!status_) end(5, SIGTERM);
  if (reader_.joinable()) reader_.join();
  if (log_fd_ >= 0) ::close(log_fd_);
}

std::optional<int> JobProcess::poll() {
  if (status_) return status_;
  int wait_status = 0;
  const pid_t done = ::waitpid(pid_, &wait_status, WNOHANG);
  if (done == pid_) status_ = decode(wait_status);
  return status_;
}

void JobProcess::signal(int signal) {
  if (!poll()) ::kill(pid_, signal);
}

int JobProcess::signal_session(int signal) const {
  int signalled = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (session_of(pid) == pid_ && ::kill(pid, signal) == 0) ++signalled;
  }
  return signalled;
}

// Waits (a bounded while) until the killed processes are gone, since the next attempt's rank
// 0 must find the run directory's lock released by this one's.
void JobProcess::kill_session() {
  for (int round = 0; round < 200 && signal_session(SIGKILL) > 0; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool JobProcess::wait_for_exit(double seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(seconds));
  while (!poll() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return poll().has_value();
}

int JobProcess::end(double grace_s, int first) {
  // A job can ignore `first`: a hung rank never reaches the step boundary SIGUSR1 saves at.
  // SIGTERM comes next, before any SIGKILL, because the launchers turn it into ending every
  // rank: mpirun kills its ranks, and srun cancels its step, which also frees the step's
  // allocation. A SIGKILLed srun does neither: its ranks go on under slurmstepd, holding the
  // run directory's lock, and its allocation holds the nodes.
  if (!poll()) {
    ::kill(pid_, first);
    if (!wait_for_exit(grace_s) && first != SIGTERM) {
      ::kill(pid_, SIGTERM);
      wait_for_exit(kTerminateWaitS);
    }
  }
  // The launcher's session outlives it when ranks are left (mpirun's died with it).
  kill_session();
  if (!poll()) {
    int wait_status = 0;
    if (::waitpid(pid_, &wait_status, 0) == pid_) status_ = decode(wait_status);
  }
  return status_.value_or(1);
}

std::string JobProcess::output() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return output_;
}

}  // namespace ms::supervise
