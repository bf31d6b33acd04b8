// The NCCL communicator on device buffers, against exactly known results. Every test skips
// with "no CUDA device" where the machine has none (NcclCommunicator::create then returns
// Unavailable on every rank, which is itself the behaviour checked there).
#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "tests/comm/typed_values.h"

namespace ms::comm {
namespace {

using testing::filled;
using testing::load;
using testing::value_of;

// A device copy of a host byte vector, copied back with to_host().
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes_ == 0 ? 1 : bytes_), cudaSuccess);
  }
  explicit DeviceBuffer(const std::vector<uint8_t>& host) : DeviceBuffer(host.size()) {
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  std::vector<uint8_t> to_host() const {
    std::vector<uint8_t> host(bytes_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  size_t bytes_;
  void* ptr_ = nullptr;
};

constexpr DType kNcclDTypes[] = {DType::kF32, DType::kBF16, DType::kF16,
                                 DType::kI32, DType::kI64,  DType::kU8};

int64_t sum_over_ranks(DType dtype, int size, size_t i) {
  int64_t sum = 0;
  for (int r = 0; r < size; ++r) sum += value_of(dtype, r, i);
  return sum;
}

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = MpiCommunicator::world();
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    world_ = std::move(world).value();
    auto nccl = NcclCommunicator::create(*world_, "nccl-world");
    if (nccl.status().code() == StatusCode::kUnavailable) {
      GTEST_SKIP() << "no CUDA device: " << nccl.status().message();
    }
    ASSERT_TRUE(nccl.ok()) << nccl.status().to_string();
    comm_ = std::move(nccl).value();
    rank_ = comm_->rank();
    size_ = comm_->size();
  }

  std::unique_ptr<MpiCommunicator> world_;
  std::unique_ptr<NcclCommunicator> comm_;
  int rank_ = 0;
  int size_ = 1;
};

TEST_F(Nccl, AllreduceSumForEveryDType) {
  const size_t n = 37;
  for (DType dtype : kNcclDTypes) {
    DeviceBuffer send(filled(dtype, rank_, n));
    DeviceBuffer recv(n * dtype_size(dtype));
    ASSERT_TRUE(comm_->allreduce(send.get(), recv.get(), n, dtype, ReduceOp::kSum).ok());
    const std::vector<uint8_t> out = recv.to_host();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(load(dtype, out.data(), i), sum_over_ranks(dtype, size_, i)) << dtype_name(dtype);
    }
  }
}

TEST_F(Nccl, AllreduceMaxInPlace) {
  DeviceBuffer buf(filled(DType::kI32, rank_, 9));
  ASSERT_TRUE(comm_->allreduce(buf.get(), buf.get(), 9, DType::kI32, ReduceOp::kMax).ok());
  const std::vector<uint8_t> out = buf.to_host();
  for (size_t i = 0; i < 9; ++i) {
    const int64_t expected =
        i % 2 == 1 ? value_of(DType::kI32, 0, i) : value_of(DType::kI32, size_ - 1, i);
    EXPECT_EQ(load(DType::kI32, out.data(), i), expected);
  }
}

TEST_F(Nccl, BroadcastAllgatherReduceScatter) {
  const size_t n = 5;
  const DType dtype = DType::kF32;
  DeviceBuffer bcast(filled(dtype, rank_, n));
  ASSERT_TRUE(comm_->broadcast(bcast.get(), n, dtype, size_ - 1).ok());
  EXPECT_EQ(bcast.to_host(), filled(dtype, size_ - 1, n));

  DeviceBuffer gather_send(filled(dtype, rank_, n));
  DeviceBuffer gather_recv(n * size_ * dtype_size(dtype));
  ASSERT_TRUE(comm_->allgather(gather_send.get(), gather_recv.get(), n, dtype).ok());
  const std::vector<uint8_t> gathered = gather_recv.to_host();
  for (int r = 0; r < size_; ++r) {
    for (size_t i = 0; i < n; ++i)
      EXPECT_EQ(load(dtype, gathered.data(), r * n + i), value_of(dtype, r, i));
  }

  DeviceBuffer rs_send(filled(dtype, rank_, n * size_));
  DeviceBuffer rs_recv(n * dtype_size(dtype));
  ASSERT_TRUE(comm_->reduce_scatter(rs_send.get(), rs_recv.get(), n, dtype, ReduceOp::kSum).ok());
  const std::vector<uint8_t> reduced = rs_recv.to_host();
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(load(dtype, reduced.data(), i), sum_over_ranks(dtype, size_, rank_ * n + i));
  }
}

TEST_F(Nccl, AllgathervAndAlltoallvWithUnevenCounts) {
  const DType dtype = DType::kBF16;
  std::vector<size_t> counts(size_);
  for (int r = 0; r < size_; ++r) counts[r] = r + 1;
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  DeviceBuffer send(filled(dtype, rank_, counts[rank_]));
  DeviceBuffer recv(total * dtype_size(dtype));
  ASSERT_TRUE(comm_->allgatherv(send.get(), counts[rank_], recv.get(), counts, dtype).ok());
  const std::vector<uint8_t> gathered = recv.to_host();
  size_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    for (size_t i = 0; i < counts[r]; ++i)
      EXPECT_EQ(load(dtype, gathered.data(), offset + i), value_of(dtype, r, i));
    offset += counts[r];
  }

  // Every rank sends (dst + 1) elements to rank dst: value_of(dtype, src, dst * 10 + j).
  std::vector<size_t> send_counts(size_);
  std::vector<size_t> recv_counts(size_, static_cast<size_t>(rank_ + 1));
  std::vector<uint8_t> host_send;
  for (int dst = 0; dst < size_; ++dst) {
    send_counts[dst] = dst + 1;
    const std::vector<uint8_t> block = filled(dtype, rank_, dst + 1, dst * 10);
    host_send.insert(host_send.end(), block.begin(), block.end());
  }
  DeviceBuffer a2a_send(host_send);
  DeviceBuffer a2a_recv(size_ * (rank_ + 1) * dtype_size(dtype));
  ASSERT_TRUE(
      comm_->alltoallv(a2a_send.get(), send_counts, a2a_recv.get(), recv_counts, dtype).ok());
  const std::vector<uint8_t> exchanged = a2a_recv.to_host();
  for (int src = 0; src < size_; ++src) {
    for (int j = 0; j <= rank_; ++j) {
      EXPECT_EQ(load(dtype, exchanged.data(), src * (rank_ + 1) + j),
                value_of(dtype, src, rank_ * 10 + j));
    }
  }
}

TEST_F(Nccl, NonblockingAllreduceAndSendRecvRing) {
  DeviceBuffer buf(filled(DType::kI64, rank_, 4));
  auto request = comm_->iallreduce(buf.get(), buf.get(), 4, DType::kI64, ReduceOp::kSum);
  ASSERT_TRUE(request.ok()) << request.status().to_string();
  ASSERT_TRUE(request->wait().ok());
  const std::vector<uint8_t> out = buf.to_host();
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(load(DType::kI64, out.data(), i), sum_over_ranks(DType::kI64, size_, i));

  const int next = (rank_ + 1) % size_;
  const int prev = (rank_ + size_ - 1) % size_;
  DeviceBuffer mine(filled(DType::kF32, rank_, 3));
  DeviceBuffer theirs(3 * sizeof(float));
  auto in = comm_->irecv(theirs.get(), 3, DType::kF32, prev, 0);
  auto out_request = comm_->isend(mine.get(), 3, DType::kF32, next, 0);
  ASSERT_TRUE(in.ok() && out_request.ok());
  ASSERT_TRUE(in->wait().ok());
  ASSERT_TRUE(out_request->wait().ok());
  EXPECT_EQ(theirs.to_host(), filled(DType::kF32, prev, 3));
  EXPECT_TRUE(comm_->barrier().ok());
}

TEST_F(Nccl, SplitBootstrapsASubgroup) {
  auto split = comm_->split(rank_ % 2, rank_, "parity");
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  int32_t host_value = rank_;
  DeviceBuffer value(std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&host_value),
                                          reinterpret_cast<uint8_t*>(&host_value) + 4));
  ASSERT_TRUE((*split)->allreduce(value.get(), value.get(), 1, DType::kI32, ReduceOp::kSum).ok());
  int32_t expected = 0;
  for (int r = rank_ % 2; r < size_; r += 2) expected += r;
  EXPECT_EQ(load(DType::kI32, value.to_host().data(), 0), expected);
}

TEST_F(Nccl, U16HasNoNcclType) {
  DeviceBuffer buf(8);
  const Status status = comm_->allreduce(buf.get(), buf.get(), 4, DType::kU16, ReduceOp::kSum);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ms::comm
