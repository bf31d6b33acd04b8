// Variable-length byte strings under mpirun (1 to 4 ranks): every rank's string gathered on every
// rank in rank order (an empty one included), and length-prefixed sends around a ring.
#include <gtest/gtest.h>

#include "comm/mpi_communicator.h"
#include "comm/variable_length.h"

namespace ms::comm {
namespace {

class VariableLength : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = MpiCommunicator::world();
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    world_ = std::move(world).value();
  }
  std::unique_ptr<MpiCommunicator> world_;
};

// Rank r's text: r * 3 bytes (rank 0's is empty), with a zero byte inside when there is room.
std::string text_of(int rank) {
  std::string s;
  for (int i = 0; i < 3 * rank; ++i) s.push_back(static_cast<char>('a' + (rank + i) % 26));
  if (!s.empty()) s[s.size() / 2] = '\0';
  return s;
}

TEST_F(VariableLength, AllGatherGivesEveryRankEachTextInRankOrder) {
  auto all = all_gather_variable(*world_, text_of(world_->rank()));
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  ASSERT_EQ(all->size(), static_cast<size_t>(world_->size()));
  for (int r = 0; r < world_->size(); ++r) EXPECT_EQ((*all)[r], text_of(r)) << "rank " << r;
}

TEST_F(VariableLength, AllGatherOfNothingEverywhereGivesEmptyTexts) {
  auto all = all_gather_variable(*world_, "");
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_EQ(*all, std::vector<std::string>(world_->size()));
}

TEST_F(VariableLength, SizedSendsAroundARing) {
  const int size = world_->size();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  const int rank = world_->rank();
  const int next = (rank + 1) % size;
  const int prev = (rank + size - 1) % size;
  constexpr int kTag = 4242;
  // Even ranks send first so the blocking sends pair up (an odd ring closes on rank 0's recv).
  if (rank % 2 == 0) {
    ASSERT_TRUE(send_sized(*world_, text_of(rank), next, kTag).ok());
    auto got = recv_sized(*world_, prev, kTag);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, text_of(prev));
  } else {
    auto got = recv_sized(*world_, prev, kTag);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, text_of(prev));
    ASSERT_TRUE(send_sized(*world_, text_of(rank), next, kTag).ok());
  }
}

TEST_F(VariableLength, APayloadAfterALengthReceivedByTheCaller) {
  if (world_->size() < 2) GTEST_SKIP() << "needs two ranks";
  constexpr int kTag = 4243;
  const std::string message = "a request";
  if (world_->rank() == 0) {
    ASSERT_TRUE(send_sized(*world_, message, 1, kTag).ok());
    ASSERT_TRUE(send_sized(*world_, "", 1, kTag).ok());
  } else if (world_->rank() == 1) {
    int64_t length = -1;
    auto pending = world_->irecv(&length, 1, DType::kI64, 0, kTag);
    ASSERT_TRUE(pending.ok());
    ASSERT_TRUE(pending->wait().ok());
    auto got = recv_sized_payload(*world_, 0, kTag, length);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, message);
    auto empty = recv_sized(*world_, 0, kTag);
    ASSERT_TRUE(empty.ok()) << empty.status().to_string();
    EXPECT_EQ(*empty, "");
  }
}

TEST_F(VariableLength, ANegativeLengthIsRefused) {
  auto got = recv_sized_payload(*world_, 0, 1, -5);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace ms::comm
