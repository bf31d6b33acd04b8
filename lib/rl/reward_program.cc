#include "rl/reward_program.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace ms::rl {
namespace {

// One running copy of the program and its share of the queries.
struct Copy {
  pid_t pid = -1;
  int to_child = -1;    // its stdin (a socket, so a write after it exits fails with EPIPE
                        // instead of raising SIGPIPE in the trainer: send() takes MSG_NOSIGNAL)
  int from_child = -1;  // its stdout
  int errors = -1;      // its stderr, kept for the error message
  size_t first_query = 0;
  size_t num_queries = 0;
  std::string input;
  size_t written = 0;
  std::string output;
  std::string error_output;
  int status = 0;
  bool exited = false;
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::string query_lines(std::span<const RewardQuery> queries) {
  std::string lines;
  for (const RewardQuery& q : queries) {
    nlohmann::json line = {{"prompt", q.prompt}, {"response", q.response}, {"answer", q.answer}};
    lines += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    lines += '\n';
  }
  return lines;
}

Status start_copy(const std::string& command, Copy& copy) {
  int in[2];
  int out[2];
  int err[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) {
    return ErrnoError("socketpair for reward program", command, errno);
  }
  int opened[6] = {in[0], in[1], -1, -1, -1, -1};
  auto fail = [&](const char* what) {
    const int e = errno;
    for (int& fd : opened) close_fd(fd);
    return ErrnoError(what, command, e);
  };
  if (::pipe2(out, O_CLOEXEC) != 0) return fail("pipe for reward program");
  opened[2] = out[0];
  opened[3] = out[1];
  if (::pipe2(err, O_CLOEXEC) != 0) return fail("pipe for reward program");
  opened[4] = err[0];
  opened[5] = err[1];
  // posix_spawn, not fork: with asynchronous rollouts the rollout thread starts the program
  // while the trainer's thread may be inside a threaded OpenBLAS call, and fork runs
  // OpenBLAS's pthread_atfork handler, which stops its worker threads under that call (the
  // trainer then waited forever). glibc's posix_spawn runs no fork handlers. The child gets its
  // own process group, so a timeout kills whatever the shell started too; dup2 clears the
  // pipes' close-on-exec on the three standard descriptors.
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, in[1], STDIN_FILENO);
  ::posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  ::posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  ::posix_spawnattr_init(&attributes);
  ::posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  ::posix_spawnattr_setpgroup(&attributes, 0);
  std::string shell = "sh", flag = "-c", text = command;
  char* argv[] = {shell.data(), flag.data(), text.data(), nullptr};
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, "/bin/sh", &actions, &attributes, argv, environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    errno = spawned;
    return fail("starting /bin/sh for reward program");
  }
  ::close(in[1]);
  ::close(out[1]);
  ::close(err[1]);
  copy.pid = pid;
  copy.to_child = in[0];
  copy.from_child = out[0];
  copy.errors = err[0];
  ::fcntl(copy.to_child, F_SETFL, O_NONBLOCK);
  if (copy.input.empty()) ::shutdown(copy.to_child, SHUT_WR);
  return Status::OK();
}

void kill_all(std::vector<Copy>& copies) {
  for (Copy& c : copies) {
    if (c.pid > 0 && !c.exited) {
      ::kill(-c.pid, SIGKILL);
      ::waitpid(c.pid, &c.status, 0);
      c.exited = true;
    }
    close_fd(c.to_child);
    close_fd(c.from_child);
    close_fd(c.errors);
  }
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended abnormally";
}

std::string tail(const std::string& text) {
  constexpr size_t kKeep = 400;
  std::string t = text.size() > kKeep ? "..." + text.substr(text.size() - kKeep) : text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  return t;
}

// Moves data between us and the copies until all have closed their output and exited, or the
// deadline passes.
Status pump(const std::string& command, std::vector<Copy>& copies, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  char buffer[65536];
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Copy*, int*>> owners;
    for (Copy& c : copies) {
      if (c.to_child >= 0) {
        fds.push_back({c.to_child, POLLOUT, 0});
        owners.push_back({&c, &c.to_child});
      }
      if (c.from_child >= 0) {
        fds.push_back({c.from_child, POLLIN, 0});
        owners.push_back({&c, &c.from_child});
      }
      if (c.errors >= 0) {
        fds.push_back({c.errors, POLLIN, 0});
        owners.push_back({&c, &c.errors});
      }
    }
    if (fds.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return DeadlineExceeded("reward program '" + command + "' did not finish within " +
                              std::to_string(timeout_s) + " s (its processes were killed)");
    }
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) return ErrnoError("poll on reward program", command, errno);
    for (size_t i = 0; i < fds.size() && ready > 0; ++i) {
      if (fds[i].revents == 0) continue;
      Copy& c = *owners[i].first;
      int& fd = *owners[i].second;
      if (&fd == &c.to_child) {
        const ssize_t n = ::send(fd, c.input.data() + c.written, c.input.size() - c.written,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) c.written += static_cast<size_t>(n);
        // EPIPE: it stopped reading; its exit status or output will tell what went wrong.
        if ((n < 0 && errno != EAGAIN && errno != EINTR) || c.written == c.input.size()) {
          close_fd(fd);
        }
        continue;
      }
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n > 0) {
        (&fd == &c.from_child ? c.output : c.error_output).append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        close_fd(fd);
      }
    }
  }
  // Output closed: the copies are exiting; wait for them within what is left of the timeout.
  for (Copy& c : copies) {
    while (!c.exited) {
      const pid_t done = ::waitpid(c.pid, &c.status, WNOHANG);
      if (done == c.pid) {
        c.exited = true;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return DeadlineExceeded("reward program '" + command + "' did not exit within " +
                                std::to_string(timeout_s) + " s (its processes were killed)");
      }
      ::usleep(1000);
    }
  }
  return Status::OK();
}

// Parses one copy's output into rewards[first_query ...].
Status parse_output(const std::string& command, const Copy& c, std::vector<double>& rewards) {
  size_t line_start = 0;
  size_t line = 0;
  while (line_start < c.output.size()) {
    size_t line_end = c.output.find('\n', line_start);
    if (line_end == std::string::npos) line_end = c.output.size();
    std::string text = c.output.substr(line_start, line_end - line_start);
    if (!text.empty() && text.back() == '\r') text.pop_back();
    const size_t query = c.first_query + line;
    if (line >= c.num_queries) {
      return Corruption("reward program '" + command + "' printed more lines than the " +
                        std::to_string(c.num_queries) + " responses it was given (extra line " +
                        std::to_string(line + 1) + ": '" + tail(text) + "')");
    }
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text.c_str(), &end);
    while (end != nullptr && *end != '\0' && std::isspace(static_cast<unsigned char>(*end))) ++end;
    if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE ||
        !std::isfinite(value)) {
      return Corruption("reward program '" + command + "': output line " +
                        std::to_string(line + 1) + " (response " + std::to_string(query) +
                        ") is not a finite number: '" + tail(text) + "'");
    }
    rewards[query] = value;
    ++line;
    line_start = line_end + 1;
  }
  if (line != c.num_queries) {
    return Corruption("reward program '" + command + "' printed " + std::to_string(line) +
                      " lines for " + std::to_string(c.num_queries) +
                      " responses (the first missing is response " +
                      std::to_string(c.first_query + line) + ")");
  }
  return Status::OK();
}

}  // namespace

Result<std::vector<double>> run_reward_program(const RewardProgram& program,
                                               std::span<const RewardQuery> queries) {
  if (program.command.empty()) return InvalidArgument("reward program command is empty");
  if (program.processes < 1) {
    return InvalidArgument("reward program processes must be at least 1, got " +
                           std::to_string(program.processes));
  }
  if (!(program.timeout_s > 0.0)) {
    return InvalidArgument("reward program timeout must be positive, got " +
                           std::to_string(program.timeout_s));
  }
  std::vector<double> rewards(queries.size(), 0.0);
  if (queries.empty()) return rewards;
  const size_t copies_n = std::min<size_t>(static_cast<size_t>(program.processes), queries.size());
  std::vector<Copy> copies(copies_n);
  size_t next = 0;
  for (size_t i = 0; i < copies_n; ++i) {
    Copy& c = copies[i];
    c.first_query = next;
    c.num_queries = queries.size() / copies_n + (i < queries.size() % copies_n ? 1 : 0);
    next += c.num_queries;
    c.input = query_lines(queries.subspan(c.first_query, c.num_queries));
  }
  Status status = Status::OK();
  for (Copy& c : copies) {
    status = start_copy(program.command, c);
    if (!status.ok()) break;
  }
  if (status.ok()) status = pump(program.command, copies, program.timeout_s);
  kill_all(copies);
  MS_RETURN_IF_ERROR(status);
  for (const Copy& c : copies) {
    if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0) {
      std::string message = "reward program '" + program.command + "' " + describe_exit(c.status) +
                            " (responses " + std::to_string(c.first_query) + " to " +
                            std::to_string(c.first_query + c.num_queries - 1) + ")";
      if (!c.error_output.empty()) message += "; its stderr: " + tail(c.error_output);
      return Internal(message);
    }
  }
  for (const Copy& c : copies) MS_RETURN_IF_ERROR(parse_output(program.command, c, rewards));
  return rewards;
}

Result<std::vector<bool>> flawed_positives(const RewardProgram& checker,
                                           std::span<const RewardQuery> queries,
                                           std::span<const double> rewards) {
  std::vector<bool> flawed(queries.size(), false);
  std::vector<size_t> positives;
  std::vector<RewardQuery> shown;
  for (size_t i = 0; i < queries.size(); ++i) {
    if (rewards[i] > 0.0) {
      positives.push_back(i);
      shown.push_back(queries[i]);
    }
  }
  if (shown.empty()) return flawed;
  Result<std::vector<double>> checked = run_reward_program(checker, shown);
  if (!checked.ok()) return checked.status().with_context("step checker");
  const std::vector<double>& steps = *checked;
  for (size_t j = 0; j < steps.size(); ++j) {
    if (steps[j] < -1.0 || steps[j] != std::floor(steps[j])) {
      return Corruption("step checker '" + checker.command + "': line " + std::to_string(j + 1) +
                        " is " + std::to_string(steps[j]) +
                        "; expected the index of the first flawed step, or -1 for none");
    }
    flawed[positives[j]] = steps[j] != -1.0;
  }
  return flawed;
}

}  // namespace ms::rl
