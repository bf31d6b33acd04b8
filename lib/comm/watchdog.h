// Watchdog for hung collectives. The thread that calls MPI/NCCL publishes the operation it is
// blocked in (begin/end around every blocking call and Request::wait); a background thread that
// never calls MPI checks it periodically. When one operation has waited past the timeout, the
// watchdog logs the operation, group and peers once and writes <dir>/inflight/rank-00003.json:
//   {"rank","host","pid","t","op","group","group_ranks","seq","bytes","waiting_s","stack"}
// A blocked thread's stack cannot be read safely from another thread, so "stack" is the
// call-site backtrace captured when the operation began (raw addresses are captured, which is
// cheap; they are symbolized only when a report is written).
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"

namespace ms::comm {

// Return addresses of the call site, innermost first.
struct CallStack {
  static constexpr int kMaxFrames = 32;
  std::array<void*, kMaxFrames> frames{};
  int depth = 0;

  static CallStack capture();
  // One line per frame, as backtrace_symbols() prints them.
  std::vector<std::string> symbolize() const;
};

// The operation a rank is blocked in.
struct InflightOp {
  std::string op;                // "allreduce", "barrier", "recv", ...
  std::string group;             // communicator name: "world", "dp", ...
  std::vector<int> group_ranks;  // world ranks of the group's members
  uint64_t seq = 0;              // per-group operation number
  uint64_t bytes = 0;            // bytes this rank sends (or receives, for recv)
  double start_wall_s = 0;       // seconds since the Unix epoch
  std::chrono::steady_clock::time_point start;
  CallStack stack;
};

// An InflightOp starting now, with the call-site stack captured (a few microseconds).
InflightOp make_inflight_op(const char* op, const std::string& group, std::vector<int> group_ranks,
                            uint64_t seq, uint64_t bytes);

struct WatchdogOptions {
  double timeout_s = 600;  // report an operation that has waited this long
  std::string dir;         // the report goes to <dir>/inflight/rank-NNNNN.json
  double poll_s = 0;       // how often to look; 0 picks min(timeout/4, 1 s)
};

// The JSON document of an in-flight report (pretty-printed, one key per line).
std::string inflight_report_json(const InflightOp& op, int rank, const std::string& host,
                                 double now_wall_s, double waiting_s);
// "<dir>/inflight/rank-00003.json".
std::string inflight_report_path(const std::string& dir, int rank);

class Watchdog {
 public:
  // Starts the background thread. InvalidArgument when timeout_s <= 0 or dir is empty.
  static Result<std::shared_ptr<Watchdog>> start(WatchdogOptions options);
  // Stops and joins the thread.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Called by the communicating thread around each blocking wait.
  void begin(InflightOp op);
  void end();

  // Reports written so far (each hung operation is reported once).
  int reports_written() const;
  // The status of the most recent report write (OK when none failed).
  Status last_report_status() const;
  const WatchdogOptions& options() const { return options_; }

 private:
  explicit Watchdog(WatchdogOptions options);
  void run();
  void report(const InflightOp& op, double waiting_s);

  const WatchdogOptions options_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool active_ = false;
  bool reported_ = false;  // the current operation has been reported
  InflightOp current_;
  int reports_written_ = 0;
  Status last_report_status_;
  std::thread thread_;
};

// RAII begin/end around one blocking wait; does nothing when the watchdog is null.
class InflightScope {
 public:
  InflightScope(Watchdog* watchdog, InflightOp op);
  ~InflightScope();
  InflightScope(const InflightScope&) = delete;
  InflightScope& operator=(const InflightScope&) = delete;

 private:
  Watchdog* watchdog_;
};

}  // namespace ms::comm
