// Hang analysis on crafted in-flight reports: who is missing from a blocked collective, who is
// behind, who waits on a mismatched operation, and reading reports as the watchdog writes them.
#include "diag/hang.h"

#include <gtest/gtest.h>

#include "comm/watchdog.h"
#include "io/atomic_file.h"
#include "tests/io/temp_dir.h"

namespace ms::diag {
namespace {

InflightReport waiting(int rank, const std::string& op, const std::string& group,
                       std::vector<int> members, uint64_t seq) {
  InflightReport r;
  r.rank = rank;
  r.host = "node" + std::to_string(rank / 2);
  r.op = op;
  r.group = group;
  r.group_ranks = std::move(members);
  r.seq = seq;
  r.waiting_s = 30 + rank;
  r.stack = {"ms-train(+0x1234)", "libmpi.so(MPI_Allreduce+0x10)"};
  return r;
}

TEST(Hang, RankMissingFromTheWorldAllreduceIsNamed) {
  const std::vector<InflightReport> reports{waiting(0, "allreduce", "world", {0, 1, 2, 3}, 12),
                                            waiting(1, "allreduce", "world", {0, 1, 2, 3}, 12),
                                            waiting(3, "allreduce", "world", {0, 1, 2, 3}, 12)};
  const HangAnalysis a = analyze_hang(reports);
  ASSERT_EQ(a.groups.size(), 1u);
  EXPECT_EQ(a.groups[0].ranks, (std::vector<int>{0, 1, 3}));
  ASSERT_EQ(a.outliers.size(), 1u);
  EXPECT_EQ(a.outliers[0].rank, 2);
  EXPECT_EQ(a.outliers[0].kind, OutlierKind::kNotWaiting);
  EXPECT_EQ(a.outliers[0].report, -1);
}

TEST(Hang, LowerSequenceNumberIsBehind) {
  const std::vector<InflightReport> reports{waiting(0, "allreduce", "dp", {0, 2}, 7),
                                            waiting(2, "allreduce", "dp", {0, 2}, 6)};
  const HangAnalysis a = analyze_hang(reports);
  ASSERT_EQ(a.outliers.size(), 1u);  // a tie goes to the later operation
  EXPECT_EQ(a.outliers[0].kind, OutlierKind::kBehind);
  EXPECT_EQ(a.outliers[0].rank, 2);
}

TEST(Hang, AheadOfTheMajority) {
  const std::vector<InflightReport> reports{waiting(0, "allreduce", "dp", {0, 1, 2}, 7),
                                            waiting(1, "allreduce", "dp", {0, 1, 2}, 7),
                                            waiting(2, "allreduce", "dp", {0, 1, 2}, 8)};
  const HangAnalysis a = analyze_hang(reports);
  ASSERT_EQ(a.outliers.size(), 1u);
  EXPECT_EQ(a.outliers[0].rank, 2);
  EXPECT_EQ(a.outliers[0].kind, OutlierKind::kAhead);
}

TEST(Hang, BehindInAMajority) {
  const std::vector<InflightReport> reports{waiting(0, "allreduce", "dp", {0, 1, 2}, 7),
                                            waiting(1, "allreduce", "dp", {0, 1, 2}, 7),
                                            waiting(2, "allreduce", "dp", {0, 1, 2}, 6)};
  const HangAnalysis a = analyze_hang(reports);
  EXPECT_EQ(a.groups.front().ranks, (std::vector<int>{0, 1}));
  std::vector<int> behind;
  for (const HangOutlier& o : a.outliers) {
    if (o.kind == OutlierKind::kBehind) behind.push_back(o.rank);
  }
  EXPECT_EQ(behind, std::vector<int>{2});
}

TEST(Hang, SameSequenceDifferentOperationIsAMismatch) {
  const std::vector<InflightReport> reports{waiting(0, "allreduce", "tp", {0, 1, 2}, 3),
                                            waiting(1, "allreduce", "tp", {0, 1, 2}, 3),
                                            waiting(2, "allgather", "tp", {0, 1, 2}, 3)};
  const HangAnalysis a = analyze_hang(reports);
  ASSERT_FALSE(a.outliers.empty());
  EXPECT_EQ(a.outliers[0].rank, 2);
  EXPECT_EQ(a.outliers[0].kind, OutlierKind::kMismatch);
}

TEST(Hang, CascadeWaitersAreNotBlamedWhenAMissingRankExplainsTheHang) {
  // tp groups {0,1} and {2,3}; rank 3 is stuck in compute. Rank 2 waits for it in tp; ranks 0
  // and 1 wait in dp groups for rank 2 and 3.
  const std::vector<InflightReport> reports{waiting(0, "allreduce", "dp", {0, 2}, 5),
                                            waiting(1, "allreduce", "dp", {1, 3}, 5),
                                            waiting(2, "allreduce", "tp", {2, 3}, 9)};
  const HangAnalysis a = analyze_hang(reports);
  ASSERT_EQ(a.outliers.size(), 1u);
  EXPECT_EQ(a.outliers[0].rank, 3);
}

TEST(Hang, AllWaitingTogetherHasNoOutlier) {
  const std::vector<InflightReport> reports{waiting(0, "barrier", "world", {0, 1}, 1),
                                            waiting(1, "barrier", "world", {0, 1}, 1)};
  EXPECT_TRUE(analyze_hang(reports).outliers.empty());
  EXPECT_TRUE(analyze_hang(std::vector<InflightReport>{}).outliers.empty());
}

TEST(Hang, ReportNamesMeshCoordinatesAndStacks) {
  const std::vector<InflightReport> reports{waiting(0, "allreduce", "dp", {0, 2}, 5),
                                            waiting(2, "allreduce", "dp", {0, 2}, 4)};
  Result<comm::MeshLayout> layout = comm::MeshLayout::create(comm::MeshShape{1, 2, 2, 1, 0}, 4);
  ASSERT_TRUE(layout.ok());
  const std::string text = format_hang_report(analyze_hang(reports), reports, &*layout);
  EXPECT_NE(text.find("rank 2 (node1, pp=0 dp=1 tp=0) [behind]"), std::string::npos) << text;
  EXPECT_NE(text.find("MPI_Allreduce"), std::string::npos);
  EXPECT_EQ(mesh_label(nullptr, 2), "");
}

TEST(MeshShape, ParsesKeysInAnyOrderAndRejectsNonsense) {
  Result<comm::MeshShape> shape = parse_mesh_shape("tp=2,pp=3,dp=4");
  ASSERT_TRUE(shape.ok()) << shape.status().to_string();
  EXPECT_EQ(shape->pp, 3);
  EXPECT_EQ(shape->dp, 4);
  EXPECT_EQ(shape->tp, 2);
  EXPECT_EQ(shape->ep, 1);
  EXPECT_FALSE(parse_mesh_shape("dp=0").ok());
  EXPECT_FALSE(parse_mesh_shape("xp=2").ok());
  EXPECT_FALSE(parse_mesh_shape("dp=two").ok());
  EXPECT_FALSE(parse_mesh_shape("").ok());
}

TEST(MeshShape, ParsesContextParallelAndLabelsIt) {
  Result<comm::MeshShape> shape = parse_mesh_shape("dp=2,cp=2,tp=2");
  ASSERT_TRUE(shape.ok()) << shape.status().to_string();
  EXPECT_EQ(shape->cp, 2);
  EXPECT_EQ(parse_mesh_shape("dp=2")->cp, 1);
  EXPECT_FALSE(parse_mesh_shape("cp=0").ok());
  Result<comm::MeshLayout> layout = comm::MeshLayout::create(*shape, shape->world_size());
  ASSERT_TRUE(layout.ok()) << layout.status().to_string();
  // rank 5 = ((0 * 2 + 1) * 2 + 0) * 2 + 1.
  EXPECT_EQ(mesh_label(&*layout, 5), "pp=0 dp=1 cp=0 tp=1");
}

TEST(InflightReports, ReadsWatchdogOutputFromARunDirectory) {
  io::testing::TempDir dir;
  comm::InflightOp op = comm::make_inflight_op("allreduce", "dp", {0, 1}, 42, 4096);
  ASSERT_TRUE(io::default_env().create_dirs(dir.path() + "/inflight").ok());
  ASSERT_TRUE(io::write_file_atomic(comm::inflight_report_path(dir.path(), 1),
                                    comm::inflight_report_json(op, 1, "node9", 1000.0, 61.5))
                  .ok());
  Result<std::vector<InflightReport>> reports = read_inflight_reports(dir.path());
  ASSERT_TRUE(reports.ok()) << reports.status().to_string();
  ASSERT_EQ(reports->size(), 1u);
  const InflightReport& r = reports->front();
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.host, "node9");
  EXPECT_EQ(r.seq, 42u);
  EXPECT_EQ(r.bytes, 4096u);
  EXPECT_EQ(r.group_ranks, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(r.waiting_s, 61.5);
  EXPECT_FALSE(r.stack.empty());
}

TEST(InflightReports, MalformedReportNamesFileAndKey) {
  io::testing::TempDir dir;
  ASSERT_TRUE(io::write_file_atomic(dir.file("rank-00000.json"),
                                    R"({"rank":0,"op":"allreduce","group":"dp","seq":1,)"
                                    R"("group_ranks":[0,"x"]})")
                  .ok());
  Result<std::vector<InflightReport>> reports = read_inflight_reports(dir.path());
  ASSERT_FALSE(reports.ok());
  EXPECT_NE(reports.status().message().find("rank-00000.json: key 'group_ranks'"),
            std::string::npos)
      << reports.status().message();
  EXPECT_EQ(parse_inflight_report("[1]", "x").status().code(), StatusCode::kCorruption);
}

TEST(InflightReports, NoReportsIsNoEvidenceButAMissingDirectoryIsAnError) {
  io::testing::TempDir dir;
  Result<std::vector<InflightReport>> none = read_inflight_reports(dir.path());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(read_inflight_reports(dir.file("absent")).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ms::diag
