// The expert-parallel exchange (parallel/ep_exchange.h) at every group size the world allows
// (1, 2, 4) and 1, 2 and 3 chunks, against a direct computation: every rank knows every rank's
// dispatch plan, so it knows which rows must arrive at its experts, where and with which
// values; the plan's exchanged counts and row layout, the rows at the experts, and the results
// back in dispatch order match it bitwise (under bf16 rounded to bf16 on each hop); compute sees
// the chunks in order after `before`, and polling between rows changes nothing; the statistics
// count two all-to-alls per chunk and the bytes sent to other ranks; a failed communicator's
// error is reported and ends the exchange.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/half.h"
#include "parallel/ep_exchange.h"
#include "tests/parallel/failing_communicator.h"
#include "tests/parallel/tp_harness.h"

namespace ms::parallel {
namespace {

constexpr int64_t kLocalExperts = 2;
constexpr int64_t kWidth = 3;

class ExpertExchangeTest : public testing::TpTest {};

// Rows rank `src` sends to rank j's local expert e in chunk c (some zero, none the same
// everywhere).
int64_t rows_sent(int64_t src, int64_t j, int64_t c, int64_t e) {
  return (src + 2 * j + 3 * c + e) % 3;
}

// Rank src's plan as its caller lays it out: dispatch rows grouped by global expert (j, e),
// an expert's rows in chunk order.
EpPlan caller_plan(int64_t src, int64_t P, int64_t C) {
  EpPlan plan;
  plan.chunks = C;
  plan.send_counts.assign(static_cast<size_t>(P * C * kLocalExperts), 0);
  plan.dispatch_rows = plan.send_counts;
  int64_t row = 0;
  for (int64_t j = 0; j < P; ++j) {
    for (int64_t e = 0; e < kLocalExperts; ++e) {
      for (int64_t c = 0; c < C; ++c) {
        const size_t at = static_cast<size_t>((j * C + c) * kLocalExperts + e);
        plan.dispatch_rows[at] = row;
        plan.send_counts[at] = rows_sent(src, j, c, e);
        row += plan.send_counts[at];
      }
    }
  }
  return plan;
}

int64_t dispatch_total(const EpPlan& plan) {
  int64_t n = 0;
  for (int64_t r : plan.send_counts) n += r;
  return n;
}

// Element w of dispatch row `row` of rank src: not representable in bf16.
float row_value(int64_t src, int64_t row, int64_t w) {
  return 1.0f + 0.37f * static_cast<float>(src) + 0.0173f * static_cast<float>(row) +
         0.00131f * static_cast<float>(w);
}

float on_wire(float v, bool bf16) { return bf16 ? bf16_to_float(float_to_bf16(v)) : v; }
float expert_result(float v) { return 2.0f * v + 1.0f; }

TEST_F(ExpertExchangeTest, RowsArriveAtTheirExpertsAndComeBackInDispatchOrder) {
  for (int ep_size : tp_sizes()) {
    auto group = tp_group(ep_size);
    ASSERT_NE(group, nullptr);
    const int64_t P = ep_size, me = group->rank();
    for (bool bf16 : {false, true}) {
      for (int64_t C : {1, 2, 3}) {
        SCOPED_TRACE("ep " + std::to_string(P) + " chunks " + std::to_string(C) +
                     (bf16 ? " bf16" : " f32"));
        ExpertExchange ex;
        ex.comm = group.get();
        ex.size = ep_size;
        ex.rank = group->rank();
        ex.local_experts = kLocalExperts;
        ex.bf16 = bf16;
        EpPlan plan = caller_plan(me, P, C);
        ex.plan(plan);
        ASSERT_TRUE(ex.error.ok()) << ex.error.to_string();
        EXPECT_EQ(ex.stats.collectives, 0);  // the count exchange is not counted as a round trip
        // Counts and layout: source s's rows for my expert e in chunk c, grouped by (c, e).
        ASSERT_EQ(plan.rows.size(), static_cast<size_t>(C * kLocalExperts + 1));
        EXPECT_EQ(plan.rows[0], 0);
        for (int64_t c = 0; c < C; ++c) {
          for (int64_t e = 0; e < kLocalExperts; ++e) {
            int64_t rows = 0;
            for (int64_t s = 0; s < P; ++s) {
              EXPECT_EQ(plan.recv_counts[static_cast<size_t>((s * C + c) * kLocalExperts + e)],
                        rows_sent(s, me, c, e));
              rows += rows_sent(s, me, c, e);
            }
            const size_t at = static_cast<size_t>(c * kLocalExperts + e);
            EXPECT_EQ(plan.rows[at + 1] - plan.rows[at], rows);
          }
        }
        // What must arrive at the experts, straight from every source's plan.
        const int64_t received = plan.rows.back();
        std::vector<float> expected_at(static_cast<size_t>(received * kWidth));
        for (int64_t c = 0; c < C; ++c) {
          for (int64_t e = 0; e < kLocalExperts; ++e) {
            int64_t row = plan.rows[static_cast<size_t>(c * kLocalExperts + e)];
            for (int64_t s = 0; s < P; ++s) {
              const EpPlan theirs = caller_plan(s, P, C);
              const size_t at = static_cast<size_t>((me * C + c) * kLocalExperts + e);
              for (int64_t i = 0; i < theirs.send_counts[at]; ++i, ++row) {
                for (int64_t w = 0; w < kWidth; ++w) {
                  expected_at[static_cast<size_t>(row * kWidth + w)] =
                      on_wire(row_value(s, theirs.dispatch_rows[at] + i, w), bf16);
                }
              }
            }
          }
        }
        const int64_t n = dispatch_total(plan);
        std::vector<float> rows(static_cast<size_t>(n * kWidth));
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t w = 0; w < kWidth; ++w) {
            rows[static_cast<size_t>(r * kWidth + w)] = row_value(me, r, w);
          }
        }
        std::vector<float> at(expected_at.size(), -1.0f), results(at.size(), -1.0f);
        std::vector<float> back(rows.size(), -1.0f);
        std::vector<int> order;
        bool before_ran = false;
        ex.round_trip(
            plan, rows.data(), at.data(), results.data(), back.data(), kWidth,
            [&] {
              EXPECT_TRUE(order.empty());
              before_ran = true;
            },
            [&](int c) {
              EXPECT_TRUE(before_ran);
              order.push_back(c);
              const int64_t r0 = plan.rows[static_cast<size_t>(c * kLocalExperts)];
              const int64_t r1 = plan.rows[static_cast<size_t>((c + 1) * kLocalExperts)];
              for (int64_t r = r0 * kWidth; r < r1 * kWidth; ++r) {
                results[static_cast<size_t>(r)] = expert_result(at[static_cast<size_t>(r)]);
                EXPECT_TRUE(ex.poll().ok());
              }
            });
        ASSERT_TRUE(ex.error.ok()) << ex.error.to_string();
        ASSERT_EQ(order.size(), static_cast<size_t>(C));
        for (int64_t c = 0; c < C; ++c) EXPECT_EQ(order[static_cast<size_t>(c)], c);
        EXPECT_TRUE(testing::bitwise_equal(at, expected_at));
        std::vector<float> expected_back(rows.size());
        for (size_t i = 0; i < rows.size(); ++i) {
          expected_back[i] = on_wire(expert_result(on_wire(rows[i], bf16)), bf16);
        }
        EXPECT_TRUE(testing::bitwise_equal(back, expected_back));
        // Statistics: two all-to-alls per chunk; the rows sent to other ranks, both ways.
        uint64_t remote_rows = 0;
        for (int64_t j = 0; j < P; ++j) {
          for (int64_t c = 0; c < C; ++c) {
            for (int64_t e = 0; e < kLocalExperts; ++e) {
              if (j != me) remote_rows += static_cast<uint64_t>(rows_sent(me, j, c, e));
            }
          }
        }
        EXPECT_EQ(ex.stats.collectives, 2 * C);
        EXPECT_EQ(ex.stats.bytes, 2 * remote_rows * kWidth * (bf16 ? 2 : 4));
        EXPECT_GE(ex.stats.active_s, 0.0);
        EXPECT_GE(ex.stats.exposed_s, 0.0);
        EXPECT_TRUE(ex.flights.empty());
        EXPECT_TRUE(ex.poll().ok());  // nothing in flight
      }
    }
  }
}

TEST_F(ExpertExchangeTest, AFailedCommunicatorsErrorIsReportedAndEndsTheExchange) {
  testing::FailingCommunicator failing(0, 2);
  ExpertExchange ex;
  ex.comm = &failing;
  ex.size = 2;
  ex.local_experts = kLocalExperts;
  EpPlan plan = caller_plan(0, 2, 2);
  ex.plan(plan);
  EXPECT_EQ(ex.error.to_string(), testing::FailingCommunicator::failure().to_string());
  // Nothing received: zero counts and rows.
  for (int64_t r : plan.recv_counts) EXPECT_EQ(r, 0);
  for (int64_t r : plan.rows) EXPECT_EQ(r, 0);

  // A round trip whose all-to-alls fail (the counts as a failed plan left them): the error is
  // kept, compute still sees every chunk (the caller ends its step with the error), and nothing
  // is waited for.
  ExpertExchange trip;
  trip.comm = &failing;
  trip.size = 2;
  trip.local_experts = kLocalExperts;
  const std::vector<float> rows(static_cast<size_t>(dispatch_total(plan) * kWidth), 1.0f);
  std::vector<float> back(rows.size());
  std::vector<float> at, results;
  int computed = 0;
  trip.round_trip(plan, rows.data(), at.data(), results.data(), back.data(), kWidth, nullptr,
                  [&](int) { ++computed; });
  EXPECT_EQ(trip.error.to_string(), testing::FailingCommunicator::failure().to_string());
  EXPECT_TRUE(trip.flights.empty());
  EXPECT_EQ(computed, 2);
}

}  // namespace
}  // namespace ms::parallel
