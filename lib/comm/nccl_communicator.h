// NCCL backend of Communicator, for buffers in GPU memory. Built only when CUDA is on
// (MS_HAVE_NCCL is defined then).
//
// Bootstrap over MPI: every rank of an MpiCommunicator checks it has a CUDA device, the ranks
// agree (so either all create the group or all get Unavailable), each picks device
// node_local_rank % device_count, rank 0 calls ncclGetUniqueId, the id is broadcast over MPI, and
// every rank calls ncclCommInitRank. Operations are enqueued on the communicator's own CUDA
// stream; blocking forms return when the stream has finished them, nonblocking forms record an
// event that the Request waits for. While waiting, NCCL's asynchronous error state is polled, so a
// failed peer becomes a Status instead of a hang when NCCL detects it.
//
// Differences from MPI: NCCL has no u16 type (InvalidArgument); send/recv ignore `tag` (messages
// between a pair of ranks match in issue order); recv cannot check the sender's count.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/watchdog.h"

namespace ms::comm {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (see above); the new group has the same ranks, named `name`.
  // Unavailable, naming the CUDA error, when any rank has no usable CUDA device or driver.
  static Result<std::unique_ptr<NcclCommunicator>> create(MpiCommunicator& bootstrap,
                                                          const std::string& name);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // The stream every operation is enqueued on, and the device it belongs to.
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  Device memory() const override { return Device::cuda(device_); }

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  const std::string& name() const override { return bootstrap_->name(); }
  const std::vector<int>& world_ranks() const override { return bootstrap_->world_ranks(); }
  uint64_t next_seq() const override { return collective_seq_; }
  void set_watchdog(std::shared_ptr<Watchdog> watchdog) override;

  Status barrier() override;
  Status broadcast(void* buf, size_t count, DType dtype, int root) override;
  Status allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;
  Status reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                        ReduceOp op) override;
  Status allgather(const void* send, void* recv, size_t send_count, DType dtype) override;
  Status allgatherv(const void* send, size_t send_count, void* recv,
                    std::span<const size_t> recv_counts, DType dtype) override;
  Status alltoall(const void* send, void* recv, size_t count, DType dtype) override;
  Status alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                   std::span<const size_t> recv_counts, DType dtype) override;
  Status send(const void* buf, size_t count, DType dtype, int dest, int tag) override;
  Status recv(void* buf, size_t count, DType dtype, int source, int tag) override;

  Result<Request> ibroadcast(void* buf, size_t count, DType dtype, int root) override;
  Result<Request> iallreduce(const void* send, void* recv, size_t count, DType dtype,
                             ReduceOp op) override;
  Result<Request> ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                  ReduceOp op) override;
  Result<Request> iallgather(const void* send, void* recv, size_t send_count, DType dtype) override;
  Result<Request> iallgatherv(const void* send, size_t send_count, void* recv,
                              std::span<const size_t> recv_counts, DType dtype) override;
  Result<Request> ialltoall(const void* send, void* recv, size_t count, DType dtype) override;
  Result<Request> ialltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                             std::span<const size_t> recv_counts, DType dtype) override;
  Result<Request> isend(const void* buf, size_t count, DType dtype, int dest, int tag) override;
  Result<Request> irecv(void* buf, size_t count, DType dtype, int source, int tag) override;

  // Splits the MPI bootstrap group and bootstraps a new NCCL group on each part.
  Result<std::unique_ptr<Communicator>> split(int color, int key, const std::string& name) override;

 private:
  NcclCommunicator(std::unique_ptr<MpiCommunicator> bootstrap, int device);
  // Bootstraps NCCL over `bootstrap` (which the new object owns) on CUDA device `device`.
  static Result<std::unique_ptr<NcclCommunicator>> create_owned(
      std::unique_ptr<MpiCommunicator> bootstrap, int device);
  Status create_stream();
  Status init_nccl();

  // The operations below enqueue one NCCL operation (or group) on the stream.
  Status enqueue_broadcast(void* buf, size_t count, DType dtype, int root);
  Status enqueue_allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op);
  Status enqueue_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                ReduceOp op);
  Status enqueue_allgather(const void* send, void* recv, size_t send_count, DType dtype);
  Status enqueue_allgatherv(const void* send, size_t send_count, void* recv,
                            std::span<const size_t> recv_counts, DType dtype);
  Status enqueue_alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                           std::span<const size_t> recv_counts, DType dtype);
  Status enqueue_send(const void* buf, size_t count, DType dtype, int dest);
  Status enqueue_recv(void* buf, size_t count, DType dtype, int source);

  InflightOp next_collective(const char* op, uint64_t bytes);
  InflightOp next_p2p(const char* op, uint64_t bytes, int peer);
  // Waits (watched) until the stream has finished everything enqueued so far.
  Status finish(InflightOp op);
  // Records an event after the enqueued work and returns a Request waiting for it.
  Result<Request> make_request(InflightOp op);

  std::unique_ptr<MpiCommunicator> bootstrap_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* scratch_ = nullptr;  // one device float, reduced by barrier()
  uint64_t collective_seq_ = 0;
  uint64_t p2p_seq_ = 0;
  std::shared_ptr<Watchdog> watchdog_;
};

}  // namespace ms::comm
