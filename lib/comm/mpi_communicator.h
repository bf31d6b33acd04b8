// MPI backend of Communicator, and the process-wide MPI start-up.
//
// Thread policy (docs/comm.md): MPI is initialized with MPI_THREAD_SERIALIZED. Only one thread
// at a time calls MPI; in the toolkit that is the thread that called init(). Helper threads
// (watchdog, telemetry sampler, checkpoint writer, thread pool) never call MPI.
//
// Every communicator this backend creates owns its MPI_Comm (freed on destruction, which must
// happen before finalize()) and has MPI_ERRORS_RETURN set, so MPI failures come back as Status.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/watchdog.h"

namespace ms::comm {

// Starts MPI (with or without mpirun: a lone process runs as an MPI singleton) at
// MPI_THREAD_SERIALIZED, sets MPI_ERRORS_RETURN on MPI_COMM_WORLD, names this process in logs
// (ms::log::set_identity(processor name, world rank)) and registers the bf16/f16 reduction
// operators. FailedPrecondition when the MPI library cannot provide the thread level. Calling it
// again once MPI is up only re-checks the thread level.
Status init(int& argc, char**& argv);
// Frees the reduction operators and finalizes MPI. Every communicator must be destroyed first.
Status finalize();
// True between init() and finalize().
bool initialized();

// The MPI datatype carrying `dtype` (bf16 and f16 travel as MPI_UINT16_T).
MPI_Datatype mpi_datatype(DType dtype);

class MpiCommunicator final : public Communicator {
 public:
  // A duplicate of MPI_COMM_WORLD named `name`. Requires init().
  static Result<std::unique_ptr<MpiCommunicator>> world(const std::string& name = "world");
  // Takes ownership of `comm` (freed on destruction) and sets MPI_ERRORS_RETURN on it.
  static Result<std::unique_ptr<MpiCommunicator>> adopt(MPI_Comm comm, const std::string& name);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  // The underlying handle, for bootstrapping other transports; this object keeps owning it.
  MPI_Comm handle() const { return comm_; }
  // split() with the concrete type; nullptr for members passing kNoColor.
  Result<std::unique_ptr<MpiCommunicator>> split_mpi(int color, int key, const std::string& name);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
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

  Result<std::unique_ptr<Communicator>> split(int color, int key, const std::string& name) override;

 private:
  MpiCommunicator(MPI_Comm comm, std::string name, int rank, int size,
                  std::vector<int> world_ranks);
  // Numbers the next collective and, when a watchdog is set, describes it for the watchdog.
  InflightOp next_collective(const char* op, uint64_t bytes);
  // The same for a point-to-point operation with `peer` (numbered apart from collectives).
  InflightOp next_p2p(const char* op, uint64_t bytes, int peer);
  Watchdog* watchdog() const { return watchdog_.get(); }
  // Count/displacement table of an allgatherv; InvalidArgument when `send_count` disagrees with
  // this rank's entry.
  Result<std::vector<int>> allgatherv_table(size_t send_count,
                                            std::span<const size_t> recv_counts) const;
  Request make_request(MPI_Request request, InflightOp op, std::vector<int> keep_alive = {});

  MPI_Comm comm_;
  std::string name_;
  int rank_;
  int size_;
  std::vector<int> world_ranks_;
  uint64_t collective_seq_ = 0;
  uint64_t p2p_seq_ = 0;
  std::shared_ptr<Watchdog> watchdog_;
};

}  // namespace ms::comm
