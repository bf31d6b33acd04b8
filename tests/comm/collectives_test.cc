// Every collective of the MPI communicator, for every dtype, against exactly known results.
// Runs under mpirun with 1, 2, 3 and 4 ranks; rank r contributes value_of(dtype, r, i) at
// element i, so the expected sum, max and min are computed here by looping over ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>

#include "comm/mpi_communicator.h"
#include "tests/comm/typed_values.h"

namespace ms::comm {
namespace {

using testing::filled;
using testing::load;
using testing::value_of;

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};

int64_t reduced(DType dtype, ReduceOp op, int size, size_t i) {
  int64_t acc = value_of(dtype, 0, i);
  for (int r = 1; r < size; ++r) {
    const int64_t v = value_of(dtype, r, i);
    acc = op == ReduceOp::kSum   ? acc + v
          : op == ReduceOp::kMax ? std::max(acc, v)
                                 : std::min(acc, v);
  }
  return acc;
}

class Collectives : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = MpiCommunicator::world();
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    comm_ = std::move(world).value();
    rank_ = comm_->rank();
    size_ = comm_->size();
  }

  std::unique_ptr<MpiCommunicator> comm_;
  int rank_ = 0;
  int size_ = 1;
};

TEST_F(Collectives, BroadcastCopiesTheRootsBuffer) {
  for (DType dtype : kAllDTypes) {
    for (int root : {0, size_ - 1}) {
      std::vector<uint8_t> buf = filled(dtype, rank_, 37);
      ASSERT_TRUE(comm_->broadcast(buf.data(), 37, dtype, root).ok());
      EXPECT_EQ(buf, filled(dtype, root, 37)) << dtype_name(dtype) << " root " << root;
    }
  }
}

TEST_F(Collectives, AllreduceSumMaxMin) {
  const size_t n = 37;
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kOps) {
      const std::vector<uint8_t> send = filled(dtype, rank_, n);
      std::vector<uint8_t> recv(send.size());
      ASSERT_TRUE(comm_->allreduce(send.data(), recv.data(), n, dtype, op).ok());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(load(dtype, recv.data(), i), reduced(dtype, op, size_, i))
            << dtype_name(dtype) << " " << reduce_op_name(op) << " element " << i;
      }
    }
  }
}

TEST_F(Collectives, AllreduceInPlace) {
  const size_t n = 19;
  for (DType dtype : kAllDTypes) {
    std::vector<uint8_t> buf = filled(dtype, rank_, n);
    ASSERT_TRUE(comm_->allreduce(buf.data(), buf.data(), n, dtype, ReduceOp::kSum).ok());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(load(dtype, buf.data(), i), reduced(dtype, ReduceOp::kSum, size_, i))
          << dtype_name(dtype) << " element " << i;
    }
  }
}

TEST_F(Collectives, ReduceScatterGivesEachRankItsReducedBlock) {
  const size_t block = 5;
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kOps) {
      const std::vector<uint8_t> send = filled(dtype, rank_, block * size_);
      std::vector<uint8_t> recv(block * dtype_size(dtype));
      ASSERT_TRUE(comm_->reduce_scatter(send.data(), recv.data(), block, dtype, op).ok());
      for (size_t i = 0; i < block; ++i) {
        ASSERT_EQ(load(dtype, recv.data(), i), reduced(dtype, op, size_, rank_ * block + i))
            << dtype_name(dtype) << " " << reduce_op_name(op) << " element " << i;
      }
    }
  }
}

TEST_F(Collectives, AllgatherConcatenatesInRankOrder) {
  const size_t n = 7;
  for (DType dtype : kAllDTypes) {
    const std::vector<uint8_t> send = filled(dtype, rank_, n);
    std::vector<uint8_t> recv(n * size_ * dtype_size(dtype));
    ASSERT_TRUE(comm_->allgather(send.data(), recv.data(), n, dtype).ok());
    for (int r = 0; r < size_; ++r) {
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(load(dtype, recv.data(), r * n + i), value_of(dtype, r, i)) << dtype_name(dtype);
      }
    }
  }
}

// Uneven counts, including a rank that contributes nothing: rank r sends (3 * r) % 4 elements.
std::vector<size_t> uneven_counts(int size) {
  std::vector<size_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = (3 * r) % 4;
  return counts;
}

void expect_gathered(DType dtype, const std::vector<uint8_t>& recv,
                     const std::vector<size_t>& counts) {
  size_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    for (size_t i = 0; i < counts[r]; ++i) {
      ASSERT_EQ(load(dtype, recv.data(), offset + i), value_of(dtype, static_cast<int>(r), i))
          << dtype_name(dtype) << " from rank " << r;
    }
    offset += counts[r];
  }
}

TEST_F(Collectives, AllgathervWithUnevenCounts) {
  const std::vector<size_t> counts = uneven_counts(size_);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  for (DType dtype : kAllDTypes) {
    const std::vector<uint8_t> send = filled(dtype, rank_, counts[rank_]);
    std::vector<uint8_t> recv(total * dtype_size(dtype));
    ASSERT_TRUE(comm_->allgatherv(send.data(), counts[rank_], recv.data(), counts, dtype).ok());
    expect_gathered(dtype, recv, counts);
  }
}

TEST_F(Collectives, AlltoallSendsBlockRToRankR) {
  const size_t n = 3;
  for (DType dtype : kAllDTypes) {
    // Block d of my send buffer holds my values for elements d*n .. d*n+n-1.
    const std::vector<uint8_t> send = filled(dtype, rank_, n * size_);
    std::vector<uint8_t> recv(n * size_ * dtype_size(dtype));
    ASSERT_TRUE(comm_->alltoall(send.data(), recv.data(), n, dtype).ok());
    for (int s = 0; s < size_; ++s) {
      for (size_t j = 0; j < n; ++j) {
        ASSERT_EQ(load(dtype, recv.data(), s * n + j), value_of(dtype, s, rank_ * n + j))
            << dtype_name(dtype) << " from rank " << s;
      }
    }
  }
}

// Rank `src` sends (src + 2 * dst) % 3 elements to rank `dst`: element j of that block is
// value_of(dtype, src, dst * 10 + j).
size_t pair_count(int src, int dst) { return static_cast<size_t>((src + 2 * dst) % 3); }

struct AlltoallvBuffers {
  std::vector<size_t> send_counts;
  std::vector<size_t> recv_counts;
  std::vector<uint8_t> send;
  std::vector<uint8_t> recv;
};

AlltoallvBuffers alltoallv_buffers(DType dtype, int rank, int size) {
  AlltoallvBuffers b;
  size_t recv_total = 0;
  for (int peer = 0; peer < size; ++peer) {
    b.send_counts.push_back(pair_count(rank, peer));
    b.recv_counts.push_back(pair_count(peer, rank));
    const std::vector<uint8_t> block = filled(dtype, rank, b.send_counts.back(), peer * 10);
    b.send.insert(b.send.end(), block.begin(), block.end());
    recv_total += b.recv_counts.back();
  }
  b.recv.resize(recv_total * dtype_size(dtype));
  return b;
}

void expect_alltoallv_result(DType dtype, int rank, const AlltoallvBuffers& b) {
  size_t offset = 0;
  for (size_t s = 0; s < b.recv_counts.size(); ++s) {
    for (size_t j = 0; j < b.recv_counts[s]; ++j) {
      ASSERT_EQ(load(dtype, b.recv.data(), offset + j),
                value_of(dtype, static_cast<int>(s), rank * 10 + j))
          << dtype_name(dtype) << " from rank " << s;
    }
    offset += b.recv_counts[s];
  }
}

TEST_F(Collectives, AlltoallvWithUnevenCounts) {
  for (DType dtype : kAllDTypes) {
    AlltoallvBuffers b = alltoallv_buffers(dtype, rank_, size_);
    ASSERT_TRUE(
        comm_->alltoallv(b.send.data(), b.send_counts, b.recv.data(), b.recv_counts, dtype).ok());
    expect_alltoallv_result(dtype, rank_, b);
  }
}

TEST_F(Collectives, SendRecvAroundARing) {
  const int next = (rank_ + 1) % size_;
  const int prev = (rank_ + size_ - 1) % size_;
  for (DType dtype : kAllDTypes) {
    const std::vector<uint8_t> send = filled(dtype, rank_, 11);
    std::vector<uint8_t> recv(send.size());
    auto sent = comm_->isend(send.data(), 11, dtype, next, /*tag=*/5);
    ASSERT_TRUE(sent.ok());
    ASSERT_TRUE(comm_->recv(recv.data(), 11, dtype, prev, /*tag=*/5).ok());
    ASSERT_TRUE(sent->wait().ok());
    EXPECT_EQ(recv, filled(dtype, prev, 11)) << dtype_name(dtype);
  }
}

TEST_F(Collectives, TagsKeepMessagesApart) {
  const int next = (rank_ + 1) % size_;
  const int prev = (rank_ + size_ - 1) % size_;
  const int32_t first = 100 + rank_;
  const int32_t second = 200 + rank_;
  auto a = comm_->isend(&first, 1, DType::kI32, next, /*tag=*/1);
  auto b = comm_->isend(&second, 1, DType::kI32, next, /*tag=*/2);
  ASSERT_TRUE(a.ok() && b.ok());
  int32_t got_second = 0;
  int32_t got_first = 0;
  ASSERT_TRUE(comm_->recv(&got_second, 1, DType::kI32, prev, /*tag=*/2).ok());
  ASSERT_TRUE(comm_->recv(&got_first, 1, DType::kI32, prev, /*tag=*/1).ok());
  EXPECT_TRUE(a->wait().ok());
  EXPECT_TRUE(b->wait().ok());
  EXPECT_EQ(got_first, 100 + prev);
  EXPECT_EQ(got_second, 200 + prev);
}

TEST_F(Collectives, BarrierAndSequenceNumbers) {
  const uint64_t before = comm_->next_seq();
  ASSERT_TRUE(comm_->barrier().ok());
  EXPECT_EQ(comm_->next_seq(), before + 1);
  EXPECT_EQ(comm_->name(), "world");
  ASSERT_EQ(comm_->world_ranks().size(), static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) EXPECT_EQ(comm_->world_ranks()[r], r);
}

// ---- nonblocking forms ----

TEST_F(Collectives, NonblockingAllreduceInPlaceCompletesOnWait) {
  for (DType dtype : kAllDTypes) {
    std::vector<uint8_t> buf = filled(dtype, rank_, 13);
    auto request = comm_->iallreduce(buf.data(), buf.data(), 13, dtype, ReduceOp::kMax);
    ASSERT_TRUE(request.ok()) << request.status().to_string();
    EXPECT_FALSE(request->done());
    ASSERT_TRUE(request->wait().ok());
    EXPECT_TRUE(request->done());
    EXPECT_TRUE(request->wait().ok());  // waiting again is harmless
    for (size_t i = 0; i < 13; ++i) {
      ASSERT_EQ(load(dtype, buf.data(), i), reduced(dtype, ReduceOp::kMax, size_, i))
          << dtype_name(dtype);
    }
  }
}

TEST_F(Collectives, NonblockingAllreduceCompletesUnderTestPolling) {
  std::vector<uint8_t> send = filled(DType::kF32, rank_, 64);
  std::vector<uint8_t> recv(send.size());
  auto request = comm_->iallreduce(send.data(), recv.data(), 64, DType::kF32, ReduceOp::kSum);
  ASSERT_TRUE(request.ok());
  bool done = false;
  while (!done) {
    auto polled = request->test();
    ASSERT_TRUE(polled.ok()) << polled.status().to_string();
    done = *polled;
  }
  for (size_t i = 0; i < 64; ++i) {
    ASSERT_EQ(load(DType::kF32, recv.data(), i), reduced(DType::kF32, ReduceOp::kSum, size_, i));
  }
}

TEST_F(Collectives, NonblockingCollectivesInFlightTogether) {
  for (DType dtype : kAllDTypes) {
    const size_t n = 4;
    std::vector<uint8_t> bcast = filled(dtype, rank_, n);
    const std::vector<uint8_t> gather_send = filled(dtype, rank_, n);
    std::vector<uint8_t> gather_recv(n * size_ * dtype_size(dtype));
    const std::vector<uint8_t> rs_send = filled(dtype, rank_, n * size_);
    std::vector<uint8_t> rs_recv(n * dtype_size(dtype));
    const std::vector<uint8_t> a2a_send = filled(dtype, rank_, n * size_);
    std::vector<uint8_t> a2a_recv(n * size_ * dtype_size(dtype));

    std::vector<Request> requests;
    auto keep = [&requests](Result<Request> started) {
      ASSERT_TRUE(started.ok()) << started.status().to_string();
      requests.push_back(std::move(started).value());
    };
    keep(comm_->ibroadcast(bcast.data(), n, dtype, size_ - 1));
    keep(comm_->iallgather(gather_send.data(), gather_recv.data(), n, dtype));
    keep(comm_->ireduce_scatter(rs_send.data(), rs_recv.data(), n, dtype, ReduceOp::kMin));
    keep(comm_->ialltoall(a2a_send.data(), a2a_recv.data(), n, dtype));
    ASSERT_EQ(requests.size(), 4u);
    ASSERT_TRUE(wait_all(requests).ok());

    EXPECT_EQ(bcast, filled(dtype, size_ - 1, n)) << dtype_name(dtype);
    for (int r = 0; r < size_; ++r) {
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(load(dtype, gather_recv.data(), r * n + i), value_of(dtype, r, i));
        EXPECT_EQ(load(dtype, a2a_recv.data(), r * n + i), value_of(dtype, r, rank_ * n + i));
      }
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(load(dtype, rs_recv.data(), i),
                reduced(dtype, ReduceOp::kMin, size_, rank_ * n + i))
          << dtype_name(dtype);
    }
  }
}

TEST_F(Collectives, NonblockingVariableCountForms) {
  const std::vector<size_t> counts = uneven_counts(size_);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  for (DType dtype : kAllDTypes) {
    const std::vector<uint8_t> send = filled(dtype, rank_, counts[rank_]);
    std::vector<uint8_t> gathered(total * dtype_size(dtype));
    auto gather = comm_->iallgatherv(send.data(), counts[rank_], gathered.data(), counts, dtype);
    AlltoallvBuffers b = alltoallv_buffers(dtype, rank_, size_);
    auto exchange =
        comm_->ialltoallv(b.send.data(), b.send_counts, b.recv.data(), b.recv_counts, dtype);
    ASSERT_TRUE(gather.ok() && exchange.ok());
    ASSERT_TRUE(gather->wait().ok());
    ASSERT_TRUE(exchange->wait().ok());
    expect_gathered(dtype, gathered, counts);
    expect_alltoallv_result(dtype, rank_, b);
  }
}

TEST_F(Collectives, NonblockingSendRecvRing) {
  const int next = (rank_ + 1) % size_;
  const int prev = (rank_ + size_ - 1) % size_;
  const int64_t mine = 1000 + rank_;
  int64_t theirs = 0;
  auto in = comm_->irecv(&theirs, 1, DType::kI64, prev, 9);
  auto out = comm_->isend(&mine, 1, DType::kI64, next, 9);
  ASSERT_TRUE(in.ok() && out.ok());
  ASSERT_TRUE(in->wait().ok());
  ASSERT_TRUE(out->wait().ok());
  EXPECT_EQ(theirs, 1000 + prev);
}

TEST_F(Collectives, DroppedRequestIsCompletedByItsDestructor) {
  int32_t value = rank_ + 1;
  {
    auto request = comm_->iallreduce(&value, &value, 1, DType::kI32, ReduceOp::kSum);
    ASSERT_TRUE(request.ok());
  }
  EXPECT_EQ(value, size_ * (size_ + 1) / 2);
}

}  // namespace
}  // namespace ms::comm
