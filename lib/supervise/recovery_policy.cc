#include "supervise/recovery_policy.h"

namespace ms::supervise {

std::string_view fault_kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kCrash: return "crash";
    case FaultKind::kHang: return "hang";
    case FaultKind::kSlow: return "slow";
    case FaultKind::kFaulty: return "faulty";
    case FaultKind::kNumerical: return "numerical";
  }
  return "unknown";
}

std::string_view action_name(Action action) {
  switch (action) {
    case Action::kRestart: return "restart";
    case Action::kEvictAndRestart: return "evict";
    case Action::kStop: return "stop";
  }
  return "unknown";
}

Decision RecoveryPolicy::decide(const Incident& incident) {
  Decision decision = choose(incident);
  if (decision.action == Action::kEvictAndRestart) ++evictions_;
  history_.push_back({incident, decision});
  return decision;
}

Decision RecoveryPolicy::choose(const Incident& incident) const {
  const std::string kind(fault_kind_name(incident.kind));
  const std::string at = " at step " + std::to_string(incident.step);
  const std::string machine = incident.machine_name.empty()
                                  ? "machine " + std::to_string(incident.machine)
                                  : incident.machine_name;
  if (static_cast<int>(history_.size()) >= options_.max_restarts) {
    return {Action::kStop, -1, false,
            "the job has already been restarted " + std::to_string(history_.size()) +
                " times (--max-restarts)"};
  }
  bool named_before = false;
  for (const Past& past : history_) {
    if (incident.machine >= 0 && past.incident.machine == incident.machine) named_before = true;
    if (past.incident.kind != incident.kind || past.incident.step != incident.step) continue;
    const bool kept_same = incident.kind != FaultKind::kNumerical && incident.machine >= 0 &&
                           past.incident.machine == incident.machine &&
                           past.decision.action != Action::kEvictAndRestart;
    if (kept_same) {
      return {Action::kEvictAndRestart, incident.machine, false,
              "the " + kind + at + " struck " + machine + " again after a restart: the second "
              "signal its removal waited for"};
    }
    return {Action::kStop, -1, false,
            "the same " + kind + " fault" + at + " came back after a restart on " +
                (past.decision.action == Action::kEvictAndRestart ? "healthy machines"
                                                                  : "the same machines") +
                ": treated as a fault of the code or data, not of a machine"};
  }
  if (incident.kind == FaultKind::kNumerical) {
    return {Action::kRestart, -1, false,
            "a non-finite value" + at + " may be transient: restarting from the newest "
            "checkpoint on the same machines"};
  }
  if (incident.machine < 0) {
    return {Action::kRestart, -1, false,
            "no machine is named: restarting from the newest checkpoint on the same machines"};
  }
  if (evictions_ < options_.max_evictions) {
    return {Action::kEvictAndRestart, incident.machine, false,
            "removing " + machine + " (" + std::to_string(evictions_ + 1) + " of at most " +
                std::to_string(options_.max_evictions) + " removals without a second signal)"};
  }
  if (incident.signals >= 2 || named_before) {
    return {Action::kEvictAndRestart, incident.machine, false,
            "removing " + machine + " beyond --max-evictions: " +
                (named_before ? "an earlier incident named it too" : "two sources name it")};
  }
  return {Action::kRestart, -1, true,
          "not removing " + machine + ": " + std::to_string(evictions_) + " machine(s) already "
          "removed (--max-evictions " + std::to_string(options_.max_evictions) +
          ") and no second signal names it; restarting on the same machines"};
}

}  // namespace ms::supervise
