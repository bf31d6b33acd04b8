// What the supervisor does about a fault: restart from the newest checkpoint, remove the
// suspected machine first, or stop the job with a report. Pure bookkeeping over the incidents
// so far, so every rule is unit-tested without running a job:
//   - a numerical fault, or one that names no machine, restarts on the same machines (it may be
//     transient);
//   - a fault that names a machine removes it, up to PolicyOptions::max_evictions machines;
//     beyond that only with a second signal: two sources naming it in one incident (a crash
//     and detect, say), or an earlier incident that named it too. Otherwise the removal is held
//     back and the job restarts as it was;
//   - the same kind of fault at the same step again after a restart is a code or data fault,
//     and stops the job, unless it is not numerical and names a machine that was kept (held
//     back) the first time: then it is that machine's second signal, and it goes;
//   - more than max_restarts restarts stop the job.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ms::supervise {

enum class FaultKind { kCrash, kHang, kSlow, kFaulty, kNumerical };
std::string_view fault_kind_name(FaultKind kind);

struct Incident {
  FaultKind kind = FaultKind::kCrash;
  int64_t step = 0;    // the step it struck: one past the last step completed
  int machine = -1;    // the suspected machine (MachinePool index); -1: none named
  std::string machine_name;  // its name, for the messages
  int signals = 0;     // independent sources that name that machine in this incident
  std::string summary;  // one line: what was seen
};

struct PolicyOptions {
  int max_evictions = 1;
  int max_restarts = 10;
};

enum class Action { kRestart, kEvictAndRestart, kStop };
std::string_view action_name(Action action);

struct Decision {
  Action action = Action::kRestart;
  int machine = -1;    // the machine to remove (kEvictAndRestart)
  bool held_back = false;  // a removal the eviction limit held back
  std::string reason;  // one sentence
};

class RecoveryPolicy {
 public:
  explicit RecoveryPolicy(PolicyOptions options) : options_(options) {}
  // Decides about `incident` and records both.
  Decision decide(const Incident& incident);
  int evictions() const { return evictions_; }

 private:
  struct Past {
    Incident incident;
    Decision decision;
  };
  Decision choose(const Incident& incident) const;

  PolicyOptions options_;
  std::vector<Past> history_;
  int evictions_ = 0;
};

}  // namespace ms::supervise
