// check's arithmetic as a specification: nccl-tests' busbw factors, buffer shapes of the size
// sweep, and the exact inputs that let every wrong element be counted.
#include "diag/check.h"
#include "diag/check_report.h"

#include <gtest/gtest.h>

#include <vector>

namespace ms::diag {
namespace {

// The factors nccl-tests publishes in doc/PERFORMANCE.md ("Summary": AllReduce 2(n-1)/n,
// ReduceScatter and AllGather (n-1)/n, Broadcast 1, AlltoAll (n-1)/n) and uses in its sources
// (src/sendrecv.cu: factor 1), checked at github.com/NVIDIA/nccl-tests commit a0b82b2 (2026-07).
TEST(BusBandwidth, NcclTestsFactors) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kBroadcast, 4), 1);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kSendRecv, 4), 1);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kAllReduce, 1), 0);
}

TEST(CollectiveShape, TotalsOfBlockedCollectivesAreMultiplesOfTheRankCount) {
  const CollectiveShape ag = collective_shape(Collective::kAllGather, 1000, 3);
  EXPECT_EQ(ag.count, 249u);  // 250 floats rounded down to a multiple of 3
  EXPECT_EQ(ag.send_count, 83u);
  EXPECT_EQ(ag.recv_count, 249u);
  EXPECT_EQ(ag.bytes, 996u);
  const CollectiveShape rs = collective_shape(Collective::kReduceScatter, 1024, 4);
  EXPECT_EQ(rs.send_count, 256u);
  EXPECT_EQ(rs.recv_count, 64u);
  const CollectiveShape ar = collective_shape(Collective::kAllReduce, 1024, 4);
  EXPECT_EQ(ar.send_count, 256u);
  EXPECT_EQ(ar.recv_count, 256u);
}

TEST(SweepSizes, GeometricAndInclusive) {
  EXPECT_EQ(*sweep_sizes(1024, 16384, 4), (std::vector<size_t>{1024, 4096, 16384}));
  EXPECT_EQ(*sweep_sizes(64, 64, 2), (std::vector<size_t>{64}));
  EXPECT_FALSE(sweep_sizes(0, 64, 2).ok());
  EXPECT_FALSE(sweep_sizes(128, 64, 2).ok());
  EXPECT_FALSE(sweep_sizes(64, 128, 1).ok());
}

TEST(ExactInputs, SmallIntegersSoSumsAreExact) {
  for (size_t i = 0; i < 40; ++i) {
    const float v = input_value(3, i);
    EXPECT_GE(v, 1);
    EXPECT_LE(v, 16);
    EXPECT_EQ(v, static_cast<float>(static_cast<int>(v)));
  }
}

// Simulates each collective on `ranks` ranks in plain C++ and checks that count_wrong accepts
// the right answer and counts each corrupted element.
std::vector<std::vector<float>> simulate(Collective c, int ranks, size_t size_bytes) {
  const CollectiveShape s = collective_shape(c, size_bytes, ranks);
  std::vector<std::vector<float>> send(ranks, std::vector<float>(s.send_count));
  for (int r = 0; r < ranks; ++r) fill_send_buffer(c, r, send[r]);
  std::vector<std::vector<float>> recv(ranks, std::vector<float>(s.recv_count, 0));
  const size_t n = static_cast<size_t>(ranks);
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < s.recv_count; ++i) {
      switch (c) {
        case Collective::kAllReduce:
          for (int q = 0; q < ranks; ++q) recv[r][i] += send[q][i];
          break;
        case Collective::kAllGather:
          recv[r][i] = send[i / s.send_count][i % s.send_count];
          break;
        case Collective::kReduceScatter:
          for (int q = 0; q < ranks; ++q) recv[r][i] += send[q][r * s.recv_count + i];
          break;
        case Collective::kAllToAll: {
          const size_t block = s.send_count / n;
          recv[r][i] = send[i / block][r * block + i % block];
          break;
        }
        case Collective::kBroadcast:
          recv[r][i] = send[0][i];
          break;
        case Collective::kSendRecv:
          recv[r][i] = send[(r - 1 + ranks) % ranks][i];
          break;
      }
    }
  }
  return recv;
}

TEST(CountWrong, CorrectResultsHaveNoWrongElementsAndCorruptionIsCounted) {
  for (Collective c : kAllCollectives) {
    for (int ranks : {1, 2, 3, 4}) {
      std::vector<std::vector<float>> recv = simulate(c, ranks, 384);
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(count_wrong(c, r, ranks, recv[r]), 0u)
            << collective_name(c) << " ranks=" << ranks << " rank=" << r;
      }
      recv[0][0] += 1;
      recv[0].back() = -7;
      EXPECT_EQ(count_wrong(c, 0, ranks, recv[0]), 2u) << collective_name(c);
    }
  }
}

TEST(CollectiveNames, RoundTrip) {
  for (Collective c : kAllCollectives) EXPECT_EQ(*parse_collective(collective_name(c)), c);
  EXPECT_EQ(parse_collective("allreduc").status().code(), StatusCode::kInvalidArgument);
}

PlacementResult measured(double time_us, double algbw, double busbw, uint64_t wrong) {
  PlacementResult p;
  p.measured = true;
  p.time_us = time_us;
  p.algbw_gbs = algbw;
  p.busbw_gbs = busbw;
  p.wrong = wrong;
  return p;
}

TEST(CollectiveTable, NcclTestsLayoutWithOutOfPlaceAndInPlaceColumns) {
  CollectiveResult row;
  row.collective = Collective::kAllReduce;
  row.bytes = 1024;
  row.count = 256;
  row.out_of_place = measured(10, 0.1024, 0.1536, 0);
  row.in_place = measured(20, 0.0512, 0.0768, 3);
  const std::vector<CollectiveResult> rows{row};
  const std::string text = format_collective_table(Collective::kAllReduce, 4, rows);
  EXPECT_NE(text.find("out-of-place"), std::string::npos) << text;
  EXPECT_LT(text.find("out-of-place"), text.find("in-place")) << text;
  const size_t header = text.find("# ");
  EXPECT_NE(text.find("time    algbw    busbw  #wrong       time    algbw    busbw  #wrong",
                      header),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("   float    sum     -1      10.00    0.102    0.154       0      20.00"
                      "    0.051    0.077       3"),
            std::string::npos)
      << text;
  // The average covers both placements, as nccl-tests' does.
  EXPECT_NE(text.find("# Avg bus bandwidth    : 0.1152"), std::string::npos) << text;
  EXPECT_EQ(row.wrong(), 3u);
}

TEST(CollectiveTable, ACollectiveWithoutAnInPlaceFormPrintsNA) {
  EXPECT_FALSE(has_in_place(Collective::kSendRecv));
  EXPECT_TRUE(has_in_place(Collective::kAllGather));
  CollectiveResult row;
  row.collective = Collective::kSendRecv;
  row.bytes = 1024;
  row.count = 256;
  row.out_of_place = measured(10, 0.1024, 0.1024, 0);
  const std::vector<CollectiveResult> rows{row};
  const std::string text = format_collective_table(Collective::kSendRecv, 2, rows);
  EXPECT_NE(text.find("       0        N/A      N/A      N/A     N/A\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("# Avg bus bandwidth    : 0.1024"), std::string::npos) << text;
}

TEST(SlowLinks, OneSlowPairIsFound) {
  P2pMatrix m;
  m.ranks = 4;
  m.gbs.assign(16, 10.0);
  for (int i = 0; i < 4; ++i) m.gbs[i * 4 + i] = 0;
  m.gbs[1 * 4 + 2] = 4.0;
  const std::vector<SlowLink> slow = find_slow_links(m, HealthOptions{});
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0].src, 1);
  EXPECT_EQ(slow[0].dst, 2);
  EXPECT_EQ(slow[0].finding.subject, "1->2");
}


// nccl-tests' algbw = S / t and busbw = algbw x factor on a worked example: an 8-rank
// all-reduce of 1 GiB in 10 ms moves 107.374 GB/s algorithmically, 187.905 GB/s on the bus.
TEST(BusBandwidth, WorkedAllReduceExample) {
  const double algbw = (1u << 30) / 10e-3 / 1e9;
  EXPECT_NEAR(algbw, 107.374, 1e-3);
  EXPECT_NEAR(algbw * bus_bandwidth_factor(Collective::kAllReduce, 8), 187.905, 1e-3);
  EXPECT_NEAR(algbw * bus_bandwidth_factor(Collective::kAllToAll, 8), 93.952, 1e-3);
}

CollectiveResult row(size_t bytes, double out_busbw, double in_busbw, bool in_place = true) {
  CollectiveResult r;
  r.bytes = bytes;
  r.out_of_place.measured = true;
  r.out_of_place.busbw_gbs = out_busbw;
  r.in_place.measured = in_place;
  r.in_place.busbw_gbs = in_busbw;
  return r;
}

TEST(MinBusBandwidth, PeakIsTheBestSizeAndPlacement) {
  const std::vector<CollectiveResult> rows = {row(1024, 0.5, 0.4), row(4096, 2.0, 2.5),
                                              row(16384, 2.2, 9.0, /*in_place=*/false)};
  // The unmeasured in-place 9.0 of the last row does not count.
  EXPECT_DOUBLE_EQ(peak_busbw_gbs(rows), 2.5);
  EXPECT_DOUBLE_EQ(peak_busbw_gbs({}), 0);
}

CheckResults results_of(int ranks, std::vector<std::vector<CollectiveResult>> collectives) {
  CheckResults results;
  for (int r = 0; r < ranks; ++r) results.ranks.push_back({r, "h" + std::to_string(r), {}, {}});
  results.collectives = std::move(collectives);
  return results;
}

TEST(MinBusBandwidth, CollectiveBelowTheThresholdFailsTheCheck) {
  CheckOptions options;
  options.collectives = {Collective::kAllReduce, Collective::kAllGather};
  const CheckResults results =
      results_of(4, {{row(1024, 1.0, 1.0), row(4096, 6.0, 5.0)}, {row(1024, 3.0, 2.0)}});
  HealthOptions health;
  health.group_by = telemetry::GroupBy::kRank;
  EXPECT_TRUE(judge_check(results, options, health).healthy());  // 0: not judged
  options.min_busbw_gbs = 4;
  const CheckVerdict verdict = judge_check(results, options, health);
  EXPECT_FALSE(verdict.healthy());
  ASSERT_EQ(verdict.below_min_busbw.size(), 1u);
  EXPECT_EQ(verdict.below_min_busbw[0].collective, Collective::kAllGather);
  EXPECT_DOUBLE_EQ(verdict.below_min_busbw[0].peak_busbw_gbs, 3.0);
  const std::string text = format_check_report(results, options, verdict);
  EXPECT_NE(text.find("# allgather: peak busbw 3.000 GB/s is below --min-busbw 4.000"),
            std::string::npos)
      << text;
  EXPECT_EQ(check_report_json(results, options, health, verdict)["below_min_busbw"][0]
                ["collective"],
            "allgather");
}

TEST(MinBusBandwidth, OneRankMovesNoDataAndIsNotJudged) {
  CheckOptions options;
  options.collectives = {Collective::kAllReduce};
  options.min_busbw_gbs = 4;
  const CheckResults results = results_of(1, {{row(1024, 0, 0)}});
  EXPECT_TRUE(judge_check(results, options, HealthOptions{}).below_min_busbw.empty());
}


TEST(NcclSweep, ItsRowsAreReportedCountedAndHeldToTheFloor) {
  CheckOptions options;
  options.collectives = {Collective::kAllReduce};
  options.min_busbw_gbs = 10;
  CheckResults results = results_of(2, {{row(4096, 1.0, 1.0)}});  // MPI: far below 10
  CollectiveResult nccl = row(4096, 150.0, 140.0);
  nccl.in_place.wrong = 3;
  results.nccl_collectives = {{nccl}};
  HealthOptions health;
  health.group_by = telemetry::GroupBy::kRank;
  const CheckVerdict verdict = judge_check(results, options, health);
  // The NCCL sweep alone is held to --min-busbw; its wrong elements count.
  EXPECT_TRUE(verdict.below_min_busbw.empty());
  EXPECT_EQ(verdict.wrong, 3u);
  EXPECT_FALSE(verdict.healthy());
  const std::string text = format_check_report(results, options, verdict);
  EXPECT_NE(text.find("# NCCL on GPU buffers, one rank per GPU"), std::string::npos) << text;
  EXPECT_EQ(check_report_json(results, options, health, verdict)["nccl_collectives"][0]["rows"][0]
                ["in_place"]["wrong"],
            3);
  results.nccl_collectives[0][0].out_of_place.busbw_gbs = 5;
  results.nccl_collectives[0][0].in_place.busbw_gbs = 4;
  const CheckVerdict slow = judge_check(results, options, health);
  ASSERT_EQ(slow.below_min_busbw.size(), 1u);
  EXPECT_TRUE(slow.below_min_busbw[0].nccl);
  EXPECT_NE(format_check_report(results, options, slow)
                .find("# allreduce (NCCL): peak busbw 5.000 GB/s is below --min-busbw 10.000"),
            std::string::npos);
}

TEST(NcclSweep, SkipReasonIsPrinted) {
  CheckOptions options;
  options.collectives = {};
  CheckResults results = results_of(1, {});
  results.nccl_skipped = "NCCL collectives: this build has no NCCL";
  const CheckVerdict verdict = judge_check(results, options, HealthOptions{});
  EXPECT_TRUE(verdict.healthy());
  EXPECT_NE(format_check_report(results, options, verdict)
                .find("# NCCL collectives skipped: NCCL collectives: this build has no NCCL"),
            std::string::npos);
}

}  // namespace
}  // namespace ms::diag
