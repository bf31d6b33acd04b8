// A communicator whose every call fails with the same error, as a group whose peer is gone
// would: for checking that an exchange reports a transport's error instead of going on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ms::parallel::testing {

class FailingCommunicator : public comm::Communicator {
 public:
  FailingCommunicator(int rank, int size) : rank_(rank), size_(size), ranks_(size) {}
  static Status failure() { return Unavailable("peer 1 is gone"); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return ranks_; }
  uint64_t next_seq() const override { return 0; }
  void set_watchdog(std::shared_ptr<comm::Watchdog>) override {}
  Status barrier() override { return failure(); }
  Status broadcast(void*, size_t, DType, int) override { return failure(); }
  Status allreduce(const void*, void*, size_t, DType, comm::ReduceOp) override {
    return failure();
  }
  Status reduce_scatter(const void*, void*, size_t, DType, comm::ReduceOp) override {
    return failure();
  }
  Status allgather(const void*, void*, size_t, DType) override { return failure(); }
  Status allgatherv(const void*, size_t, void*, std::span<const size_t>, DType) override {
    return failure();
  }
  Status alltoall(const void*, void*, size_t, DType) override { return failure(); }
  Status alltoallv(const void*, std::span<const size_t>, void*, std::span<const size_t>,
                   DType) override {
    return failure();
  }
  Status send(const void*, size_t, DType, int, int) override { return failure(); }
  Status recv(void*, size_t, DType, int, int) override { return failure(); }
  Result<comm::Request> ibroadcast(void*, size_t, DType, int) override { return failure(); }
  Result<comm::Request> iallreduce(const void*, void*, size_t, DType, comm::ReduceOp) override {
    return failure();
  }
  Result<comm::Request> ireduce_scatter(const void*, void*, size_t, DType,
                                        comm::ReduceOp) override {
    return failure();
  }
  Result<comm::Request> iallgather(const void*, void*, size_t, DType) override {
    return failure();
  }
  Result<comm::Request> iallgatherv(const void*, size_t, void*, std::span<const size_t>,
                                    DType) override {
    return failure();
  }
  Result<comm::Request> ialltoall(const void*, void*, size_t, DType) override {
    return failure();
  }
  Result<comm::Request> ialltoallv(const void*, std::span<const size_t>, void*,
                                   std::span<const size_t>, DType) override {
    return failure();
  }
  Result<comm::Request> isend(const void*, size_t, DType, int, int) override { return failure(); }
  Result<comm::Request> irecv(void*, size_t, DType, int, int) override { return failure(); }
  Result<std::unique_ptr<comm::Communicator>> split(int, int, const std::string&) override {
    return failure();
  }

 private:
  int rank_, size_;
  std::string name_ = "failing";
  std::vector<int> ranks_;
};

}  // namespace ms::parallel::testing
