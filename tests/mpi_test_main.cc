// main() of every multi-rank GoogleTest binary (ms_add_mpi_test). Each rank runs every test;
// rank 0 prints the usual gtest output and the other ranks print only their failures, prefixed
// with their rank. The exit status is non-zero on every rank when any rank failed, so mpirun
// and ctest see one verdict.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/mpi_communicator.h"

namespace {

// Replaces gtest's printer on ranks other than 0: failed assertions only, tagged with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(),
                   info.name());
    }
  }

 private:
  int rank_;
};

// True when any rank reports a failure.
bool any_rank_failed(bool failed) {
  auto world = ms::comm::MpiCommunicator::world("test-verdict");
  if (!world.ok()) {
    std::fprintf(stderr, "cannot collect the test verdict: %s\n",
                 world.status().to_string().c_str());
    return true;
  }
  int32_t flag = failed ? 1 : 0;
  const ms::Status status =
      (*world)->allreduce(&flag, &flag, 1, ms::DType::kI32, ms::comm::ReduceOp::kMax);
  if (!status.ok()) {
    std::fprintf(stderr, "cannot collect the test verdict: %s\n", status.to_string().c_str());
    return true;
  }
  return flag != 0;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const ms::Status started = ms::comm::init(argc, argv);
  if (!started.ok()) {
    std::fprintf(stderr, "ms::comm::init failed: %s\n", started.to_string().c_str());
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const bool failed = RUN_ALL_TESTS() != 0;
  const bool any_failed = any_rank_failed(failed);
  if (any_failed && !failed && rank == 0) {
    std::fprintf(stderr,
                 "[rank 0] every test passed here, but another rank failed: see the "
                 "[rank N] lines\n");
  }
  const ms::Status finished = ms::comm::finalize();
  if (!finished.ok()) {
    std::fprintf(stderr, "ms::comm::finalize failed: %s\n", finished.to_string().c_str());
    return 1;
  }
  return any_failed ? 1 : 0;
}
