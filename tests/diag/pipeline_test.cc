// Pipeline-parallel traces in the straggler analysis: the replay treats pipeline sends as
// nonblocking, reproduces the measured run, predicts what-if runs, and the report's measured
// bubble matches the schedule's theoretical one.
//
// The traces come from a small event-driven executor of parallel::pp_schedule's action lists,
// written here as the trainer will run them: a send is posted and forgotten (t0 = t1 = the post
// time), a recv waits until its send was posted plus a fixed transfer time, compute waits for
// nothing else; at the end of a step every rank joins one allreduce on "world" and then runs
// "optim". Sequence numbers restart every step, as the trainer's do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "diag/pipeline_bubble.h"
#include "diag/replay.h"
#include "diag/straggler.h"
#include "parallel/pp_schedule.h"

namespace ms::diag {
namespace {

using parallel::PpAction;
using parallel::PpOp;
using parallel::PpScheduleKind;
using parallel::PpScheduleShape;
using Traces = std::vector<std::vector<telemetry::TraceEvent>>;

struct PipelineJob {
  PpScheduleShape shape;
  int dp = 1;  // pipelines; rank = d * pp + pipeline rank
  int steps = 2;
  double forward_s = 1, backward_s = 2, backward_input_s = 1, backward_weight_s = 1;
  std::vector<double> rank_speed;  // compute time multiplier per pipeline rank (default 1)
  double transfer_s = 0;
  double allreduce_s = 0.5, optim_s = 0.25;
  int slow_rank = -1;  // its compute takes slow_factor times longer
  double slow_factor = 1;
};

// One thing a rank does, in program order.
struct Item {
  enum Kind { kCompute, kSend, kRecv, kAllreduce } kind = kCompute;
  std::string op;
  int stage = -1, mb = -1;
  int64_t step = 0;
  std::string group;
  uint64_t seq = 0;
  double cost = 0;
};

const char* compute_name(PpOp op) {
  switch (op) {
    case PpOp::kForward: return "fwd";
    case PpOp::kBackward: return "bwd";
    case PpOp::kBackwardInput: return "bwd_input";
    default: return "bwd_weight";
  }
}

// Pairing id of the message leaving virtual stage `from` for micro-batch `mb`: activations
// even, gradients odd; unique within the pipeline's group in one step.
uint64_t message_seq(int from, int mb, int micro_batches, bool gradient) {
  return 2 * static_cast<uint64_t>(from * micro_batches + mb) + (gradient ? 1 : 0);
}

Item item_of(const PipelineJob& job, const PpAction& a, int pipeline_rank, int rank, int64_t step) {
  const int pp = job.shape.pp, m = job.shape.micro_batches;
  const int stage = a.chunk * pp + pipeline_rank;
  Item it;
  it.step = step;
  it.group = "pp.dp" + std::to_string(rank / pp);
  switch (a.op) {
    case PpOp::kRecvActivation:
      it.kind = Item::kRecv, it.op = "recv", it.seq = message_seq(stage - 1, a.micro_batch, m, false);
      return it;
    case PpOp::kSendActivation:
      it.kind = Item::kSend, it.op = "send", it.seq = message_seq(stage, a.micro_batch, m, false);
      return it;
    case PpOp::kRecvGrad:
      it.kind = Item::kRecv, it.op = "recv", it.seq = message_seq(stage + 1, a.micro_batch, m, true);
      return it;
    case PpOp::kSendGrad:
      it.kind = Item::kSend, it.op = "send", it.seq = message_seq(stage, a.micro_batch, m, true);
      return it;
    default: break;
  }
  const double base = a.op == PpOp::kForward         ? job.forward_s
                      : a.op == PpOp::kBackward      ? job.backward_s
                      : a.op == PpOp::kBackwardInput ? job.backward_input_s
                                                     : job.backward_weight_s;
  const double speed = job.rank_speed.empty() ? 1.0 : job.rank_speed[pipeline_rank];
  it = Item{Item::kCompute, compute_name(a.op), stage, a.micro_batch, step, "", 0,
            base * speed * (rank == job.slow_rank ? job.slow_factor : 1.0)};
  return it;
}

std::vector<std::vector<Item>> job_programs(const PipelineJob& job) {
  const int pp = job.shape.pp;
  std::vector<std::vector<Item>> programs(static_cast<size_t>(pp * job.dp));
  for (int rank = 0; rank < pp * job.dp; ++rank) {
    Result<std::vector<PpAction>> actions = parallel::pp_schedule(job.shape, rank % pp);
    EXPECT_TRUE(actions.ok()) << actions.status().to_string();
    for (int64_t step = 0; step < job.steps; ++step) {
      for (const PpAction& a : *actions) programs[rank].push_back(item_of(job, a, rank % pp, rank, step));
      programs[rank].push_back({Item::kAllreduce, "allreduce", -1, -1, step, "world",
                                static_cast<uint64_t>(step), job.allreduce_s});
      programs[rank].push_back({Item::kCompute, "optim", rank % pp, -1, step, "", 0, job.optim_s});
    }
  }
  return programs;
}

telemetry::TraceEvent event_of(int rank, const Item& it, double t0, double t1) {
  telemetry::TraceEvent e;
  e.rank = rank;
  e.op = it.op;
  e.is_comm = it.kind != Item::kCompute;
  if (e.is_comm) {
    e.group = it.group;
    e.seq = it.seq;
    e.bytes = 4096;
  } else {
    e.stage = it.stage;
    e.mb = it.mb;
    e.step = it.step;
  }
  e.t0 = t0;
  e.t1 = t1;
  return e;
}

// Runs the job; each rank's events in program order.
Traces run_job(const PipelineJob& job) {
  const std::vector<std::vector<Item>> programs = job_programs(job);
  const size_t ranks = programs.size();
  Traces traces(ranks);
  std::vector<size_t> next(ranks, 0);
  std::vector<double> ready(ranks, 0.0);
  std::map<std::string, double> posted;  // "group#step#seq" -> post time
  std::map<uint64_t, std::vector<std::pair<size_t, double>>> arrived;  // allreduce seq
  auto key = [](const Item& it) {
    return it.group + "#" + std::to_string(it.step) + "#" + std::to_string(it.seq);
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < ranks; ++r) {
      while (next[r] < programs[r].size()) {
        const Item& it = programs[r][next[r]];
        const int rank = static_cast<int>(r);
        if (it.kind == Item::kCompute) {
          traces[r].push_back(event_of(rank, it, ready[r], ready[r] + it.cost));
          ready[r] += it.cost;
        } else if (it.kind == Item::kSend) {
          traces[r].push_back(event_of(rank, it, ready[r], ready[r]));
          posted[key(it)] = ready[r];
        } else if (it.kind == Item::kRecv) {
          if (!posted.count(key(it))) break;
          const double done = std::max(ready[r], posted[key(it)] + job.transfer_s);
          traces[r].push_back(event_of(rank, it, ready[r], done));
          ready[r] = done;
        } else {
          auto& at = arrived[it.seq];
          const bool here = std::any_of(at.begin(), at.end(), [r](const auto& a) { return a.first == r; });
          if (!here) at.emplace_back(r, ready[r]);
          if (at.size() < ranks) break;
          double last = 0;
          for (const auto& [peer, t] : at) last = std::max(last, t);
          for (const auto& [peer, t] : at) {
            traces[peer].push_back(event_of(static_cast<int>(peer), it, t, last + it.cost));
            ready[peer] = last + it.cost;
            if (peer != r) ++next[peer];
          }
        }
        ++next[r];
        progress = true;
      }
    }
  }
  for (size_t r = 0; r < ranks; ++r) {
    EXPECT_EQ(next[r], programs[r].size()) << "the generator deadlocked on rank " << r;
  }
  return traces;
}

PipelineJob job_of(int pp, PpScheduleKind kind, int micro_batches = 8) {
  PipelineJob job;
  job.shape = {pp, 1, micro_batches, kind};
  return job;
}

struct Case {
  int pp;
  PpScheduleKind kind;
  int vpp = 1;
};

std::string case_name(const Case& c) {
  return "pp " + std::to_string(c.pp) + " vpp " + std::to_string(c.vpp) + " " +
         std::string(parallel::pp_schedule_name(c.kind));
}

// Unequal stages, a real transfer time, and two pipelines joined by the allreduce.
PipelineJob uneven_job(const Case& c) {
  PipelineJob job = job_of(c.pp, c.kind);
  job.shape.vpp = c.vpp;
  job.dp = 2;
  job.steps = 3;
  job.transfer_s = 0.05;
  for (int r = 0; r < c.pp; ++r) job.rank_speed.push_back(1.0 + 0.15 * r);
  return job;
}

const std::vector<Case> kCases = {{2, PpScheduleKind::k1F1B},
                                  {4, PpScheduleKind::k1F1B},
                                  {2, PpScheduleKind::kZeroBubble},
                                  {4, PpScheduleKind::kZeroBubble},
                                  {2, PpScheduleKind::kInterleaved, 2}};

TEST(PipelineReplayTest, ReplayOfTheMeasuredProgramReproducesTheMakespan) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(case_name(c));
    const Traces traces = run_job(uneven_job(c));
    Result<ReplayProgram> program = build_program(traces);
    ASSERT_TRUE(program.ok()) << program.status().to_string();
    Result<ReplayTimes> times = replay(*program, 0.0);
    ASSERT_TRUE(times.ok()) << times.status().to_string();
    const double measured = measured_makespan(traces);
    EXPECT_NEAR(times->makespan() / measured, 1.0, 1e-6);
    // Every event, not only the last, lands where it was measured.
    for (size_t r = 0; r < traces.size(); ++r) {
      for (size_t i = 0; i < traces[r].size(); ++i) {
        ASSERT_NEAR(times->end[r][i], traces[r][i].t1, 1e-9 * measured) << "rank " << r << " op " << i;
      }
    }
  }
}

telemetry::TraceEvent p2p(int rank, const char* op, uint64_t seq, double t0, double t1) {
  Item it{op[0] == 's' ? Item::kSend : Item::kRecv, op, -1, -1, 0, "pp", seq, 0};
  return event_of(rank, it, t0, t1);
}

telemetry::TraceEvent fwd(int rank, int mb, double t0, double t1) {
  return event_of(rank, Item{Item::kCompute, "fwd", rank, mb, 0, "", 0, 0}, t0, t1);
}

// The transfer-time rule on a hand-made trace. Message 0 is posted at 0.0, rank 1 starts
// waiting at 0.5 and gets it at 1.0: the transfer is 1.0 (t1 - send post), not 0.5. Message 1,
// posted at 2.0, is already there when rank 1 asks at 5.0: it gets the waited median, 1.0.
TEST(PipelineReplayTest, TransferTimesComeFromThePostAndTheWaitedRecvs) {
  const Traces traces = {
      {p2p(0, "send", 0, 0.0, 0.0), fwd(0, 1, 0.0, 2.0), p2p(0, "send", 1, 2.0, 2.0)},
      {p2p(1, "recv", 0, 0.5, 1.0), fwd(1, 0, 1.0, 5.0), p2p(1, "recv", 1, 5.0, 5.0),
       fwd(1, 1, 5.0, 6.0)}};
  Result<ReplayProgram> program = build_program(traces);
  ASSERT_TRUE(program.ok()) << program.status().to_string();
  EXPECT_DOUBLE_EQ((*program)[1][0].duration_s, 1.0);
  EXPECT_DOUBLE_EQ((*program)[1][2].duration_s, 1.0);
  Result<ReplayTimes> times = replay(*program, 0.0);
  ASSERT_TRUE(times.ok());
  EXPECT_DOUBLE_EQ(times->makespan(), 6.0);
  // What if rank 1's first forward took 1.0: it asks for message 1 at 2.0, the moment it is
  // posted, and waits out the transfer. Rank 0 never waited for anyone.
  (*program)[1][1].duration_s = 1.0;
  times = replay(*program, 0.0);
  ASSERT_TRUE(times.ok());
  EXPECT_DOUBLE_EQ(times->end[1][2], 3.0);
  EXPECT_DOUBLE_EQ(times->makespan(), 4.0);
  EXPECT_DOUBLE_EQ(times->end[0][2], 2.0);
}

TEST(PipelineReplayTest, ASendSeenTwiceIsCorruption) {
  const Traces traces = {{p2p(0, "send", 0, 0.0, 0.0)},
                         {p2p(1, "send", 0, 0.0, 0.0), p2p(1, "recv", 0, 0.0, 1.0)}};
  Result<ReplayProgram> program = build_program(traces);
  ASSERT_FALSE(program.ok());
  EXPECT_EQ(program.status().code(), StatusCode::kCorruption);
  EXPECT_NE(program.status().message().find("send of group pp seq 0 (occurrence 0 on rank 0) "
                                            "appears again on rank 1"),
            std::string::npos)
      << program.status().message();
}

TEST(PipelineReplayTest, SendsCostTheSenderNothingAndRecvsCarryTheTransfer) {
  const Traces traces = run_job(uneven_job({4, PpScheduleKind::k1F1B}));
  Result<ReplayProgram> program = build_program(traces);
  ASSERT_TRUE(program.ok());
  for (const auto& ops : *program) {
    for (const ReplayOp& op : ops) {
      if (op.op == "send") {
        EXPECT_EQ(op.duration_s, 0.0);
      } else if (op.op == "recv") {
        // Waited or not, every recv's estimate is the generator's transfer time.
        EXPECT_NEAR(op.duration_s, 0.05, 1e-9);
      }
    }
  }
}

// The what-if the analysis asks, done directly: give the slowed stage's compute its normal
// duration and replay. The nonblocking sends must let the prediction match a real run.
TEST(PipelineReplayTest, WhatIfTheSlowStageRanAtNormalSpeedPredictsTheUnslowedRun) {
  for (const Case& c : kCases) {
    for (int slow = 0; slow < c.pp; ++slow) {
      SCOPED_TRACE(case_name(c) + ", slowed pipeline rank " + std::to_string(slow));
      PipelineJob job = uneven_job(c);
      job.dp = 1;
      job.slow_rank = slow;
      job.slow_factor = 2;
      Result<ReplayProgram> program = build_program(run_job(job));
      ASSERT_TRUE(program.ok()) << program.status().to_string();
      for (ReplayOp& op : (*program)[slow]) {
        if (!op.is_comm && op.op != "optim") op.duration_s /= 2;
      }
      Result<ReplayTimes> predicted = replay(*program, 0.0);
      ASSERT_TRUE(predicted.ok()) << predicted.status().to_string();
      job.slow_rank = -1;
      const double unslowed = measured_makespan(run_job(job));
      EXPECT_NEAR(predicted->makespan() / unslowed, 1.0, 0.01);
    }
  }
}

// The analysis's own what-if on two pipelines: the slowed rank's replica on the other pipeline
// runs at normal speed, so fixing the slowed rank recovers the most waste.
TEST(PipelineStragglerTest, TheSlowedPipelineRankTopsTheWorkers) {
  PipelineJob job = uneven_job({4, PpScheduleKind::k1F1B});
  job.slow_rank = 6;  // pipeline 1, pipeline rank 2
  job.slow_factor = 2;
  Result<StragglerReport> report = analyze_stragglers(run_job(job));
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_LT(std::fabs(report->replay_error()), 1e-6);
  const auto top = std::max_element(report->workers.begin(), report->workers.end(),
                                    [](const WhatIf& a, const WhatIf& b) { return a.share < b.share; });
  EXPECT_EQ(top->name, "rank 6");
  EXPECT_LT(top->fixed_s, report->actual_s);
}

TEST(PipelineBubbleTest, ABalanced1F1BTraceMeasuresTheTheoreticalBubble) {
  for (int pp : {2, 4}) {
    SCOPED_TRACE("pp " + std::to_string(pp));
    const int m = 8;
    const PipelineBubble bubble = measure_pipeline_bubble(run_job(job_of(pp, PpScheduleKind::k1F1B, m)));
    ASSERT_TRUE(bubble.present);
    EXPECT_EQ(bubble.pp, pp);
    EXPECT_EQ(bubble.vpp, 1);
    EXPECT_EQ(bubble.micro_batches, m);
    EXPECT_EQ(bubble.schedule, "1f1b");
    const double expected = (pp - 1.0) / (m + pp - 1.0);
    EXPECT_NEAR(bubble.measured, expected, 1e-6);
    for (const RankBubble& r : bubble.ranks) EXPECT_NEAR(r.bubble, expected, 1e-6) << "rank " << r.rank;
    ASSERT_TRUE(bubble.theoretical_known) << bubble.theoretical_error;
    EXPECT_NEAR(bubble.theoretical, expected, 1e-12);
    const std::string text = pipeline_bubble_text(bubble);
    char both[96];
    std::snprintf(both, sizeof(both), "measured %.4f (mean over ranks and steps), theoretical %.4f",
                  expected, expected);
    EXPECT_NE(text.find(both), std::string::npos) << text;
  }
}

TEST(PipelineBubbleTest, ZeroBubbleAndInterleavedTracesMeasureTheirScheduleBubble) {
  for (const Case& c : {Case{4, PpScheduleKind::kZeroBubble}, Case{2, PpScheduleKind::kInterleaved, 2}}) {
    SCOPED_TRACE(case_name(c));
    PipelineJob job = job_of(c.pp, c.kind);
    job.shape.vpp = c.vpp;
    if (c.kind == PpScheduleKind::kInterleaved) job.forward_s = 1, job.backward_s = 2;
    const PipelineBubble bubble = measure_pipeline_bubble(run_job(job));
    ASSERT_TRUE(bubble.present);
    EXPECT_EQ(bubble.schedule, parallel::pp_schedule_name(c.kind));
    EXPECT_EQ(bubble.vpp, c.vpp);
    ASSERT_TRUE(bubble.theoretical_known) << bubble.theoretical_error;
    EXPECT_NEAR(bubble.measured, bubble.theoretical, 1e-6);
  }
}

TEST(PipelineBubbleTest, TheStragglerReportCarriesTheBubble) {
  Result<StragglerReport> report = analyze_stragglers(run_job(uneven_job({4, PpScheduleKind::k1F1B})));
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_TRUE(report->pipeline.present);
  EXPECT_EQ(report->pipeline.pipelines, 2);
  EXPECT_EQ(report->pipeline.ranks.size(), 8u);
  const nlohmann::ordered_json j = straggler_report_json(*report);
  EXPECT_EQ(j["pipeline"]["pp"], 4);
  EXPECT_GT(j["pipeline"]["measured_bubble"].get<double>(), 0.0);
  EXPECT_TRUE(j["pipeline"]["theoretical_bubble"].is_number());
}

TEST(PipelineBubbleTest, ATraceWithoutPipelineHasNoBubbleSection) {
  Traces traces(2);
  for (int r = 0; r < 2; ++r) {
    Item fwd{Item::kCompute, "fwd", 0, 0, 0, "", 0, 1};
    traces[r].push_back(event_of(r, fwd, 0, 1));
  }
  const PipelineBubble bubble = measure_pipeline_bubble(traces);
  EXPECT_FALSE(bubble.present);
  EXPECT_EQ(pipeline_bubble_text(bubble), "");
}

TEST(PipelineReplayTest, ARecvWithoutItsSendIsCorruptionNamingGroupAndSeq) {
  Traces traces = run_job(job_of(2, PpScheduleKind::k1F1B, 4));
  // Drop rank 0's send of micro-batch 2's activation in step 1.
  auto& events = traces[0];
  const uint64_t seq = message_seq(0, 2, 4, false);
  int seen = 0;
  for (auto it = events.begin(); it != events.end(); ++it) {
    if (it->op == "send" && it->seq == seq && ++seen == 2) {
      events.erase(it);
      break;
    }
  }
  ASSERT_EQ(seen, 2);
  Result<ReplayProgram> program = build_program(traces);
  ASSERT_FALSE(program.ok());
  EXPECT_EQ(program.status().code(), StatusCode::kCorruption);
  const std::string& message = program.status().message();
  EXPECT_NE(message.find("recv of group pp.dp0 seq " + std::to_string(seq)), std::string::npos)
      << message;
  EXPECT_NE(message.find("no matching send"), std::string::npos) << message;
  EXPECT_FALSE(analyze_stragglers(traces).ok());
}

}  // namespace
}  // namespace ms::diag
