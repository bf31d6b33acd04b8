// MPI failures come back as Status (communicators use MPI_ERRORS_RETURN), naming the MPI call,
// the host and the rank; bad arguments are refused before MPI sees them.
#include <gtest/gtest.h>

#include "comm/mpi_communicator.h"

namespace ms::comm {
namespace {

class Errors : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = MpiCommunicator::world();
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    comm_ = std::move(world).value();
  }

  std::unique_ptr<MpiCommunicator> comm_;
};

TEST_F(Errors, InvalidRootIsACommError) {
  int32_t value = 0;
  const Status status = comm_->broadcast(&value, 1, DType::kI32, comm_->size());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kCommError);
  EXPECT_NE(status.message().find("MPI_Bcast"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("rank " + std::to_string(comm_->rank())), std::string::npos);
  EXPECT_NE(status.message().find("lib/comm/mpi_communicator.cc:"), std::string::npos);
}

TEST_F(Errors, SendToARankOutsideTheGroupIsACommError) {
  int32_t value = 0;
  const Status status = comm_->send(&value, 1, DType::kI32, comm_->size(), 0);
  EXPECT_EQ(status.code(), StatusCode::kCommError);
  EXPECT_NE(status.message().find("MPI_Send"), std::string::npos) << status.message();
  auto request = comm_->irecv(&value, 1, DType::kI32, comm_->size() + 3, 0);
  EXPECT_EQ(request.status().code(), StatusCode::kCommError);
}

TEST_F(Errors, CountTablesMustMatchTheGroupSize) {
  const std::vector<size_t> counts(comm_->size() + 1, 0);
  int32_t value = 0;
  const Status status = comm_->allgatherv(&value, 0, &value, counts, DType::kI32);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("group has " + std::to_string(comm_->size()) + " ranks"),
            std::string::npos);
}

TEST_F(Errors, AllgathervSendCountMustMatchItsEntry) {
  const std::vector<size_t> counts(comm_->size(), 1);
  int32_t value = 0;
  const Status status = comm_->allgatherv(&value, 2, &value, counts, DType::kI32);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
}

TEST_F(Errors, ShortMessageIsReportedByTheReceiver) {
  if (comm_->size() < 2) GTEST_SKIP() << "needs two ranks";
  int32_t buf[4] = {1, 2, 3, 4};
  if (comm_->rank() == 0) {
    ASSERT_TRUE(comm_->send(buf, 3, DType::kI32, 1, 4).ok());
  } else if (comm_->rank() == 1) {
    const Status status = comm_->recv(buf, 4, DType::kI32, 0, 4);
    EXPECT_EQ(status.code(), StatusCode::kCommError);
    EXPECT_NE(status.message().find("expected 4 i32 elements, got 3"), std::string::npos)
        << status.message();
  }
}

TEST(CommInit, InitTwiceIsHarmless) {
  int argc = 0;
  char** argv = nullptr;
  EXPECT_TRUE(init(argc, argv).ok());
  EXPECT_TRUE(initialized());
}

}  // namespace
}  // namespace ms::comm
