// The launcher and ms-train messages the supervisor reads, pinned on samples of their real text
// (OpenMPI 4.1's mpirun, Slurm's srun, ms-train's failure agreement).
#include "supervise/job_output.h"

#include <gtest/gtest.h>

namespace ms::supervise {
namespace {

// mpirun 4.1.4 after `kill -9` of rank 2 (captured on this machine).
constexpr const char* kMpirunSignal = R"(step 4/12 | loss 10.80
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun noticed that process rank 2 with PID 0 on node vm exited on signal 9 (Killed).
--------------------------------------------------------------------------
)";

// mpirun 4.1.4 after rank 1 exited with status 3.
constexpr const char* kMpirunExit = R"(--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[3752,1],1]
  Exit code:    3
--------------------------------------------------------------------------
)";

TEST(JobOutputTest, RankKilledBySignal) {
  const auto found = failed_rank_in_output(kMpirunSignal);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->rank, 2);
  EXPECT_NE(found->how.find("exited on signal 9"), std::string::npos);
}

TEST(JobOutputTest, FirstRankToExitNonZero) {
  const auto found = failed_rank_in_output(kMpirunExit);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->rank, 1);
}

TEST(JobOutputTest, AgreementNamesTheOriginOverTheFirstToExit) {
  const std::string text = std::string("ms-train: error: writing shard failed on rank 3: disk full\n") +
                           kMpirunExit;
  const auto found = failed_rank_in_output(text);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->rank, 3);
}

TEST(JobOutputTest, SignalDeathOutranksPeersFailingAfterIt) {
  const std::string text = std::string("allreduce failed on rank 0: connection reset\n") + kMpirunSignal;
  EXPECT_EQ(failed_rank_in_output(text)->rank, 2);
}

TEST(JobOutputTest, AbortAndSrun) {
  EXPECT_EQ(failed_rank_in_output("MPI_ABORT was invoked on rank 5 in communicator MPI_COMM_WORLD\n")->rank, 5);
  EXPECT_EQ(failed_rank_in_output("srun: error: node07: task 6: Exited with exit code 1\n")->rank, 6);
  EXPECT_EQ(failed_rank_in_output("srun: error: node07: tasks 4-7: Killed\n")->rank, 4);
  EXPECT_FALSE(failed_rank_in_output("all good\n").has_value());
}

TEST(JobOutputTest, NumericalFaults) {
  const auto loss = numerical_fault_in_output(
      "ms-train: error: the training loss is not finite at step 5 on rank 3 (dp rank 3); lower "
      "optim.lr\n");
  ASSERT_TRUE(loss.has_value());
  EXPECT_EQ(loss->step, 5);
  EXPECT_EQ(loss->rank, 3);
  const auto norm = numerical_fault_in_output("the gradient norm is not finite at step 12 (every rank sees it)");
  ASSERT_TRUE(norm.has_value());
  EXPECT_EQ(norm->step, 12);
  EXPECT_EQ(norm->rank, -1);
  EXPECT_FALSE(numerical_fault_in_output(kMpirunSignal).has_value());
}

TEST(JobOutputTest, LastLines) {
  EXPECT_EQ(last_lines("a\nb\nc\n", 2), "b\nc\n");
  EXPECT_EQ(last_lines("a\nb\nc", 2), "b\nc");
  EXPECT_EQ(last_lines("a\nb\n", 5), "a\nb\n");
  EXPECT_EQ(last_lines("", 3), "");
}

}  // namespace
}  // namespace ms::supervise
