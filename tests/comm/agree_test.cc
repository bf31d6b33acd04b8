// The failure agreement under mpirun (1 to 4 ranks): when one rank fails, every rank returns
// that rank's code and message; when none fails, every rank goes on. The end-of-job agreement
// picks which ranks print. (Its abort path ends the process, so tests/e2e/mpi_failure_test.sh
// covers that from a shell.)
#include <gtest/gtest.h>

#include "comm/agree.h"
#include "comm/mpi_communicator.h"

namespace ms::comm {
namespace {

class Agree : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = MpiCommunicator::world();
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    world_ = std::move(world).value();
  }

  int last() const { return world_->size() - 1; }
  std::unique_ptr<MpiCommunicator> world_;
};

bool contains(const Status& s, const std::string& part) {
  return s.message().find(part) != std::string::npos;
}

TEST_F(Agree, EveryRankOkGoesOn) {
  EXPECT_TRUE(agree(*world_, Status::OK(), "opening the data").ok());
}

TEST_F(Agree, OneFailingRankSharesItsCodeAndMessageWithEveryRank) {
  const Status mine = world_->rank() == last() ? NotFound("/data/x.bin: no such file") : Status::OK();
  const Status agreed = agree(*world_, mine, "opening the data");
  ASSERT_FALSE(agreed.ok());
  EXPECT_EQ(agreed.code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(agreed, "/data/x.bin: no such file")) << agreed.message();
  if (world_->size() == 1) {
    EXPECT_EQ(agreed.message(), mine.message()) << "a single process keeps its own message";
  } else {
    EXPECT_EQ(agreed.message(), "opening the data failed on rank " + std::to_string(last()) +
                                    ": /data/x.bin: no such file");
  }
}

TEST_F(Agree, TheLowestFailingRankSpeaksAndTheOthersAreCounted) {
  if (world_->size() < 3) GTEST_SKIP() << "needs three ranks";
  const int rank = world_->rank();
  const Status mine = rank == 0 ? Status::OK() : IOError("disk " + std::to_string(rank) + " full");
  const Status agreed = agree(*world_, mine, "writing");
  EXPECT_EQ(agreed.code(), StatusCode::kIOError);
  const std::string others = std::to_string(world_->size() - 2);
  EXPECT_EQ(agreed.message(), "writing failed on rank 1: disk 1 full (and on " + others +
                                  (world_->size() == 3 ? " other rank)" : " other ranks)"));
}

TEST_F(Agree, ASubgroupNamesTheWorldRank) {
  if (world_->size() < 2) GTEST_SKIP() << "needs two ranks";
  // Odd world ranks only; the last odd one fails.
  const bool odd = world_->rank() % 2 == 1;
  auto split = world_->split(odd ? 0 : Communicator::kNoColor, 0, "odd");
  ASSERT_TRUE(split.ok());
  if (!odd) return;
  Communicator& group = **split;
  const int failing = group.world_ranks().back();
  const Status mine = world_->rank() == failing ? Internal("boom") : Status::OK();
  const Status agreed = agree(group, mine, "the step");
  if (group.size() == 1) {
    EXPECT_EQ(agreed.message(), "boom");
  } else {
    EXPECT_EQ(agreed.message(), "the step failed on rank " + std::to_string(failing) + ": boom");
  }
}

// The end-of-job agreement runs on a communicator of its own.
class JobEndTest : public Agree {
 protected:
  void SetUp() override {
    Agree::SetUp();
    auto exit_group = world_->split_mpi(0, world_->rank(), "job-end");
    ASSERT_TRUE(exit_group.ok());
    exit_ = std::move(exit_group).value();
  }

  JobEnd end_with(const Status& local) {
    Result<JobEnd> end = agree_job_end(*exit_, local, 30.0, [] { ADD_FAILURE() << "abandoned"; });
    EXPECT_TRUE(end.ok()) << end.status().to_string();
    return end.ok() ? *end : JobEnd{};
  }

  std::unique_ptr<MpiCommunicator> exit_;
};

TEST_F(JobEndTest, NoFailureNobodyReports) {
  const JobEnd end = end_with(Status::OK());
  EXPECT_EQ(end.failed_ranks, 0);
  EXPECT_FALSE(end.report_here);
}

TEST_F(JobEndTest, OnlyTheFailingRankReports) {
  const bool failing = world_->rank() == last();
  const JobEnd end = end_with(failing ? Internal("only here") : Status::OK());
  EXPECT_EQ(end.failed_ranks, 1);
  EXPECT_EQ(end.report_here, failing);
}

TEST_F(JobEndTest, AnErrorEveryRankSharesIsReportedOnce) {
  const JobEnd end = end_with(InvalidArgument("the same on every rank"));
  EXPECT_EQ(end.failed_ranks, world_->size());
  EXPECT_EQ(end.report_here, world_->rank() == 0);
}

TEST_F(JobEndTest, DifferentErrorsAreEachReported) {
  const JobEnd end = end_with(Internal("rank " + std::to_string(world_->rank()) + " failed"));
  EXPECT_EQ(end.failed_ranks, world_->size());
  EXPECT_TRUE(end.report_here);
}

}  // namespace
}  // namespace ms::comm
