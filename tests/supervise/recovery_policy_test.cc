#include "supervise/recovery_policy.h"

#include <gtest/gtest.h>

namespace ms::supervise {
namespace {

Incident fault(FaultKind kind, int64_t step, int machine, int signals = 1) {
  return Incident{kind, step, machine, machine >= 0 ? "m" + std::to_string(machine) : "", signals,
                  "test"};
}

TEST(RecoveryPolicyTest, EvictsTheNamedMachineUpToTheLimit) {
  RecoveryPolicy policy({.max_evictions = 2, .max_restarts = 10});
  Decision d = policy.decide(fault(FaultKind::kCrash, 5, 2));
  EXPECT_EQ(d.action, Action::kEvictAndRestart);
  EXPECT_EQ(d.machine, 2);
  d = policy.decide(fault(FaultKind::kHang, 9, 1));
  EXPECT_EQ(d.action, Action::kEvictAndRestart);
  EXPECT_EQ(d.machine, 1);
  EXPECT_EQ(policy.evictions(), 2);
  // The third machine needs a second signal.
  d = policy.decide(fault(FaultKind::kSlow, 12, 3));
  EXPECT_EQ(d.action, Action::kRestart);
  EXPECT_TRUE(d.held_back);
  EXPECT_NE(d.reason.find("--max-evictions 2"), std::string::npos) << d.reason;
}

TEST(RecoveryPolicyTest, TwoSourcesInOneIncidentAreASecondSignal) {
  RecoveryPolicy policy({.max_evictions = 0, .max_restarts = 10});
  EXPECT_EQ(policy.decide(fault(FaultKind::kHang, 4, 1, 2)).action, Action::kEvictAndRestart);
}

TEST(RecoveryPolicyTest, AHeldBackMachineGoesWhenItFailsAgain) {
  RecoveryPolicy policy({.max_evictions = 0, .max_restarts = 10});
  EXPECT_TRUE(policy.decide(fault(FaultKind::kCrash, 6, 2)).held_back);
  // Same fault, same step, same machine kept: its second signal, not a code fault.
  const Decision again = policy.decide(fault(FaultKind::kCrash, 6, 2));
  EXPECT_EQ(again.action, Action::kEvictAndRestart);
  EXPECT_EQ(again.machine, 2);
  // Named by an earlier incident of another kind: also a second signal.
  RecoveryPolicy other({.max_evictions = 0, .max_restarts = 10});
  other.decide(fault(FaultKind::kSlow, 3, 1));
  EXPECT_EQ(other.decide(fault(FaultKind::kCrash, 8, 1)).action, Action::kEvictAndRestart);
}

TEST(RecoveryPolicyTest, TheSameFaultOnHealthyMachinesStopsTheJob) {
  RecoveryPolicy policy({.max_evictions = 3, .max_restarts = 10});
  EXPECT_EQ(policy.decide(fault(FaultKind::kCrash, 7, 1)).action, Action::kEvictAndRestart);
  // Machine 1 is gone, and the crash at step 7 comes back on machine 2.
  const Decision d = policy.decide(fault(FaultKind::kCrash, 7, 2));
  EXPECT_EQ(d.action, Action::kStop);
  EXPECT_NE(d.reason.find("code or data"), std::string::npos) << d.reason;
}

TEST(RecoveryPolicyTest, NumericalFaultsRestartOnceThenStop) {
  RecoveryPolicy policy({.max_evictions = 1, .max_restarts = 10});
  const Decision first = policy.decide(fault(FaultKind::kNumerical, 5, 0));
  EXPECT_EQ(first.action, Action::kRestart);
  EXPECT_FALSE(first.held_back);
  EXPECT_EQ(policy.decide(fault(FaultKind::kNumerical, 5, 0)).action, Action::kStop);
  // A NaN at another step is a new incident.
  RecoveryPolicy other({.max_evictions = 1, .max_restarts = 10});
  other.decide(fault(FaultKind::kNumerical, 5, -1));
  EXPECT_EQ(other.decide(fault(FaultKind::kNumerical, 9, -1)).action, Action::kRestart);
}

TEST(RecoveryPolicyTest, FaultsWithoutASuspectRestartThenStopWhenRepeated) {
  RecoveryPolicy policy({.max_evictions = 1, .max_restarts = 10});
  EXPECT_EQ(policy.decide(fault(FaultKind::kHang, 3, -1)).action, Action::kRestart);
  EXPECT_EQ(policy.decide(fault(FaultKind::kHang, 3, -1)).action, Action::kStop);
}

TEST(RecoveryPolicyTest, RestartBudget) {
  RecoveryPolicy policy({.max_evictions = 0, .max_restarts = 2});
  EXPECT_EQ(policy.decide(fault(FaultKind::kHang, 1, -1)).action, Action::kRestart);
  EXPECT_EQ(policy.decide(fault(FaultKind::kHang, 2, -1)).action, Action::kRestart);
  const Decision d = policy.decide(fault(FaultKind::kHang, 3, -1));
  EXPECT_EQ(d.action, Action::kStop);
  EXPECT_NE(d.reason.find("--max-restarts"), std::string::npos);
}

}  // namespace
}  // namespace ms::supervise
