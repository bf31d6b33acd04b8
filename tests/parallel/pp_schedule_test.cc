// Pipeline schedules as pure functions: every rank's action list run against the others by the
// simulator completes without deadlock for pp in {2, 3, 4}, vpp in {1, 2} and micro-batches
// from pp to 4 pp, each (micro-batch, chunk) goes through forward and backward exactly once,
// 1F1B's simulated bubble is its closed form, interleaving and zero-bubble shrink it, the
// simulator catches a deadlock and a broken dependency, and bad shapes are refused by key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "parallel/pp_schedule.h"

namespace ms::parallel {
namespace {

std::vector<std::vector<PpAction>> all_ranks(const PpScheduleShape& s) {
  std::vector<std::vector<PpAction>> lists;
  for (int r = 0; r < s.pp; ++r) {
    auto l = pp_schedule(s, r);
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    lists.push_back(l.ok() ? *l : std::vector<PpAction>{});
  }
  return lists;
}

TEST(PpSchedule, EveryScheduleCompletesWithoutDeadlock) {
  int checked = 0;
  for (PpScheduleKind kind :
       {PpScheduleKind::k1F1B, PpScheduleKind::kInterleaved, PpScheduleKind::kZeroBubble}) {
    for (int pp : {2, 3, 4}) {
      for (int vpp : {1, 2}) {
        for (int m = pp; m <= 4 * pp; ++m) {
          const PpScheduleShape shape{pp, vpp, m, kind};
          if (!check_pp_schedule(shape).ok()) continue;
          const auto sim = simulate_pp(shape, all_ranks(shape), {1, 1, 1});
          ASSERT_TRUE(sim.ok()) << pp_schedule_name(kind) << " pp " << pp << " vpp " << vpp
                                << " m " << m << ": " << sim.status().to_string();
          EXPECT_GE(sim->bubble, 0.0);
          EXPECT_LT(sim->bubble, 1.0);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 60);
}

TEST(PpSchedule, OneFOneBHasItsClosedFormBubble) {
  for (int pp : {2, 3, 4}) {
    for (int m = pp; m <= 4 * pp; ++m) {
      const PpScheduleShape shape{pp, 1, m, PpScheduleKind::k1F1B};
      const auto sim = simulate_pp(shape, all_ranks(shape), {1, 1, 1});
      ASSERT_TRUE(sim.ok());
      const double want = static_cast<double>(pp - 1) / (m + pp - 1);
      EXPECT_NEAR(sim->bubble, want, 1e-12) << "pp " << pp << " m " << m;
      EXPECT_NEAR(*pp_theoretical_bubble(shape), want, 1e-12);
    }
  }
}

TEST(PpSchedule, InterleavingAndZeroBubbleShrinkTheBubble) {
  for (int pp : {2, 4}) {
    const int m = 2 * pp;
    const PpScheduleShape base{pp, 1, m, PpScheduleKind::k1F1B};
    const PpScheduleShape inter{pp, 2, m, PpScheduleKind::kInterleaved};
    const PpScheduleShape zb{pp, 1, m, PpScheduleKind::kZeroBubble};
    const double b1 = simulate_pp(base, all_ranks(base), {1, 1, 1})->bubble;
    // Interleaved chunks hold half the layers each: half the cost per pass.
    const double bi = simulate_pp(inter, all_ranks(inter), {0.5, 0.5, 0.5})->bubble;
    const double bz = simulate_pp(zb, all_ranks(zb), {1, 1, 1})->bubble;
    EXPECT_LT(bi, b1) << "pp " << pp;
    EXPECT_LT(bz, b1) << "pp " << pp;
    EXPECT_NEAR(*pp_theoretical_bubble(zb), bz, 1e-12);
  }
}

TEST(PpSchedule, OneFOneBOrderAndMessagesOnTheMiddleRank) {
  // pp 3, rank 1, 4 micro-batches: one warm-up forward, then F B pairs, then one backward.
  const auto l = pp_schedule({3, 1, 4, PpScheduleKind::k1F1B}, 1);
  ASSERT_TRUE(l.ok());
  std::string ops;
  for (const PpAction& a : *l) {
    if (a.op == PpOp::kForward || a.op == PpOp::kBackward) {
      ops += std::string(pp_op_name(a.op)) + std::to_string(a.micro_batch) + " ";
    }
  }
  EXPECT_EQ(ops, "F0 F1 B0 F2 B1 F3 B2 B3 ");
  EXPECT_EQ((*l)[0], (PpAction{PpOp::kRecvActivation, 0, 0, 0}));
  EXPECT_EQ((*l)[2], (PpAction{PpOp::kSendActivation, 0, 0, 2}));
}

TEST(PpSchedule, ZeroBubbleDefersWeightGradients) {
  const auto l = pp_schedule({4, 1, 8, PpScheduleKind::kZeroBubble}, 0);
  ASSERT_TRUE(l.ok());
  int last_bi = -1, first_w = -1, i = 0;
  for (const PpAction& a : *l) {
    if (a.op == PpOp::kBackwardInput) last_bi = i;
    if (a.op == PpOp::kBackwardWeight && first_w < 0) first_w = i;
    EXPECT_NE(a.op, PpOp::kBackward);
    ++i;
  }
  EXPECT_GE(first_w, 0);
  EXPECT_LT(first_w, last_bi) << "some W fills a gap before the last input gradient";
}

TEST(PpSchedule, SimulatorCatchesDeadlockAndBrokenDependencies) {
  const PpScheduleShape shape{2, 1, 2, PpScheduleKind::k1F1B};
  auto lists = all_ranks(shape);
  // Rank 1 waiting for a gradient before it ever computes: nobody will send it.
  lists[1].insert(lists[1].begin(), PpAction{PpOp::kRecvGrad, 1, 0, 0});
  auto sim = simulate_pp(shape, lists);
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("deadlocks"), std::string::npos) << sim.status().message();
  lists = all_ranks(shape);
  lists[0].pop_back();  // drop rank 0's last backward
  sim = simulate_pp(shape, lists);
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("exactly once"), std::string::npos) << sim.status().message();
  lists = all_ranks(shape);
  std::swap(lists[0][0], lists[0][1]);  // send an activation before computing it
  EXPECT_FALSE(simulate_pp(shape, lists).ok());
}

TEST(PpSchedule, RefusesBadShapesNamingTheKey) {
  auto s = check_pp_schedule({2, 2, 4, PpScheduleKind::k1F1B});
  EXPECT_NE(s.message().find("parallel.vpp"), std::string::npos) << s.message();
  s = check_pp_schedule({4, 2, 6, PpScheduleKind::kInterleaved});
  EXPECT_NE(s.message().find("multiple of parallel.pp"), std::string::npos) << s.message();
  s = check_pp_schedule({2, 1, 4, PpScheduleKind::kInterleaved});
  EXPECT_NE(s.message().find("parallel.vpp >= 2"), std::string::npos) << s.message();
  EXPECT_FALSE(check_pp_schedule({0, 1, 4, PpScheduleKind::k1F1B}).ok());
  EXPECT_FALSE(pp_schedule({2, 1, 4, PpScheduleKind::k1F1B}, 2).ok());
  EXPECT_FALSE(parse_pp_schedule("gpipe").ok());
  EXPECT_EQ(*parse_pp_schedule("zero-bubble"), PpScheduleKind::kZeroBubble);
}

TEST(PpSchedule, DescribesEveryRank) {
  const auto text = describe_pp_schedule({2, 1, 3, PpScheduleKind::k1F1B});
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("theoretical bubble 25.0%"), std::string::npos) << *text;
  EXPECT_NE(text->find("pp rank 1: F0 B0 F1 B1 F2 B2"), std::string::npos) << *text;
}

}  // namespace
}  // namespace ms::parallel
