// The pipeline replay runs the trainer's schedules: with uniform costs it reproduces the
// schedule's own simulation and theoretical bubble; uneven costs and wire time show up.
#include "plan/pipeline_replay.h"

#include <gtest/gtest.h>

namespace ms::plan {
namespace {

using parallel::PpScheduleKind;
using parallel::PpScheduleShape;

std::vector<std::vector<ChunkTimes>> uniform(int pp, int vpp, ChunkTimes t) {
  return std::vector<std::vector<ChunkTimes>>(static_cast<size_t>(pp),
                                              std::vector<ChunkTimes>(static_cast<size_t>(vpp), t));
}

TEST(PipelineReplay, UniformOneFOneBMatchesTheTheoreticalBubble) {
  for (int pp : {2, 4}) {
    for (int m : {4, 8}) {
      const PpScheduleShape shape{pp, 1, m, PpScheduleKind::k1F1B};
      Result<ReplayResult> r = replay_pipeline(shape, uniform(pp, 1, {1, 1, 1}), 0);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_NEAR(r->bubble, static_cast<double>(pp - 1) / (m + pp - 1), 1e-12) << pp << " " << m;
      EXPECT_DOUBLE_EQ(r->makespan, 3.0 * (m + pp - 1));
    }
  }
}

TEST(PipelineReplay, AgreesWithTheScheduleSimulationForEverySchedule) {
  const std::vector<PpScheduleShape> shapes = {{2, 1, 4, PpScheduleKind::k1F1B},
                                               {4, 2, 8, PpScheduleKind::kInterleaved},
                                               {4, 1, 8, PpScheduleKind::kZeroBubble}};
  for (const PpScheduleShape& shape : shapes) {
    std::vector<std::vector<parallel::PpAction>> lists;
    for (int r = 0; r < shape.pp; ++r) lists.push_back(*parallel::pp_schedule(shape, r));
    Result<parallel::PpSimulation> sim = parallel::simulate_pp(shape, lists, {1, 1, 1});
    ASSERT_TRUE(sim.ok());
    Result<ReplayResult> r = replay_pipeline(shape, uniform(shape.pp, shape.vpp, {1, 1, 1}), 0);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_NEAR(r->makespan, sim->makespan, 1e-9) << parallel::pp_schedule_name(shape.kind);
    EXPECT_NEAR(r->bubble, sim->bubble, 1e-9) << parallel::pp_schedule_name(shape.kind);
  }
}

TEST(PipelineReplay, ZeroBubbleHasLessBubbleThanOneFOneB) {
  const int pp = 4, m = 8;
  Result<ReplayResult> a =
      replay_pipeline({pp, 1, m, PpScheduleKind::k1F1B}, uniform(pp, 1, {1, 1, 1}), 0);
  Result<ReplayResult> b =
      replay_pipeline({pp, 1, m, PpScheduleKind::kZeroBubble}, uniform(pp, 1, {1, 1, 1}), 0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LT(b->bubble, a->bubble);
  EXPECT_LT(b->makespan, a->makespan);
}

TEST(PipelineReplay, AHeavierLastStageAndWireTimeLengthenTheStep) {
  const PpScheduleShape shape{2, 1, 4, PpScheduleKind::k1F1B};
  Result<ReplayResult> even = replay_pipeline(shape, uniform(2, 1, {1, 1, 1}), 0);
  auto heavy = uniform(2, 1, {1, 1, 1});
  heavy[1][0] = {2, 2, 2};
  Result<ReplayResult> uneven = replay_pipeline(shape, heavy, 0);
  Result<ReplayResult> wire = replay_pipeline(shape, uniform(2, 1, {1, 1, 1}), 0.5);
  ASSERT_TRUE(even.ok() && uneven.ok() && wire.ok());
  // The last stage is busy 4 x 6 from t = 1 (after rank 0's first forward) to 25 without a
  // gap, then rank 0 runs the last backward (2): 27.
  EXPECT_DOUBLE_EQ(uneven->makespan, 27.0);
  EXPECT_GT(wire->makespan, even->makespan);
  EXPECT_GT(uneven->bubble, even->bubble);  // rank 0 idles waiting for rank 1
}

TEST(PipelineReplay, RefusesCostsOfTheWrongShape) {
  EXPECT_FALSE(replay_pipeline({2, 1, 4, PpScheduleKind::k1F1B}, uniform(3, 1, {1, 1, 1}), 0).ok());
  EXPECT_FALSE(replay_pipeline({2, 2, 4, PpScheduleKind::k1F1B}, uniform(2, 2, {1, 1, 1}), 0).ok());
}

}  // namespace
}  // namespace ms::plan
