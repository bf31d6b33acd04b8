// The one interface every transport implements: MPI for CPU buffers, NCCL for device buffers.
// Callers (model, train, ckpt, data) see collectives over typed buffers and a Status; they never
// see MPI or NCCL handles. A Communicator is a process group with a name ("world", "dp", "tp",
// ...) used in logs, traces and watchdog reports. Counts are in elements of `dtype`, never bytes.
//
// Threading: one thread at a time may use a given Communicator (see docs/comm.md); the watchdog
// only reads the in-flight record the communicator publishes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/status.h"

namespace ms::comm {

class Watchdog;

enum class ReduceOp { kSum, kMax, kMin };

// "sum", "max", "min".
std::string_view reduce_op_name(ReduceOp op);

// Backend half of a Request; each transport implements it.
class RequestImpl {
 public:
  virtual ~RequestImpl() = default;
  virtual Status wait() = 0;
  virtual Result<bool> test() = 0;
};

// Handle of a nonblocking operation. The buffers passed to the operation must stay alive and
// untouched until wait() returns or test() returns true. A default-constructed Request is
// already complete. The communicator that issued a Request must outlive it. Destroying a
// Request that has not completed waits for it (and logs an error if that wait fails), because
// the transport may still write into the buffers.
class Request {
 public:
  Request() = default;
  explicit Request(std::unique_ptr<RequestImpl> impl) : impl_(std::move(impl)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& other) noexcept;
  ~Request();

  // Blocks until the operation completes; the transport's error otherwise. Waiting again after
  // completion returns OK at once.
  Status wait();
  // True once the operation completed (it then releases its resources). Never blocks.
  Result<bool> test();
  bool done() const { return impl_ == nullptr; }

 private:
  std::unique_ptr<RequestImpl> impl_;
};

// Waits for every request in order and returns the first failure (after waiting for all).
Status wait_all(std::span<Request> requests);

class Communicator;
// InvalidArgument naming the group, `what` and both devices when `comm` cannot take buffers on
// `device` (a null comm, or a group of one, takes any): for the places where a group meets the
// device its buffers come from (the optimizer's flat buffers, the model's activations). A caller
// that passes a group of one must not hand it device buffers: it keeps such data local.
Status check_memory(const Communicator* comm, Device device, std::string_view what);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Group name for logs and watchdog reports.
  virtual const std::string& name() const = 0;
  // World rank of every member, indexed by rank in this group.
  virtual const std::vector<int>& world_ranks() const = 0;
  // Number of collectives issued on this group so far; the next one gets this number as its
  // `seq`, so matching collectives pair up across ranks. Point-to-point operations are numbered
  // separately (per rank), since ranks take part in different numbers of them.
  virtual uint64_t next_seq() const = 0;

  // Where the buffers of every operation must be: the host for MPI, the group's CUDA device for
  // NCCL. A caller whose buffers are elsewhere stages them or is refused by check_memory.
  virtual Device memory() const { return Device::host(); }

  // Reports every blocking call and Request::wait to `watchdog` (may be null). Groups made by
  // split() inherit it.
  virtual void set_watchdog(std::shared_ptr<Watchdog> watchdog) = 0;

  virtual Status barrier() = 0;
  // buf holds `count` elements; root's content is copied to every rank.
  virtual Status broadcast(void* buf, size_t count, DType dtype, int root) = 0;
  // send and recv hold `count` elements each. send == recv reduces in place.
  virtual Status allreduce(const void* send, void* recv, size_t count, DType dtype,
                           ReduceOp op) = 0;
  // send holds size() * recv_count elements; rank r receives the reduction of block r.
  // MPI backend: send == recv reduces in place (the result lands in the first recv_count).
  virtual Status reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                ReduceOp op) = 0;
  // send holds send_count elements; recv holds size() * send_count, rank r's block at r.
  // send == recv + rank() * send_count gathers in place (as NCCL and MPI_IN_PLACE define it).
  virtual Status allgather(const void* send, void* recv, size_t send_count, DType dtype) = 0;
  // Rank r contributes recv_counts[r] elements (its send_count must equal that); recv holds the
  // blocks back to back in rank order (sum of recv_counts elements).
  virtual Status allgatherv(const void* send, size_t send_count, void* recv,
                            std::span<const size_t> recv_counts, DType dtype) = 0;
  // send and recv hold size() blocks of `count` elements; block r of send goes to rank r and
  // block r of recv came from rank r. MPI backend: send == recv exchanges in place.
  virtual Status alltoall(const void* send, void* recv, size_t count, DType dtype) = 0;
  // Like alltoall with per-peer counts; blocks are back to back in rank order on both sides.
  virtual Status alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                           std::span<const size_t> recv_counts, DType dtype) = 0;
  virtual Status send(const void* buf, size_t count, DType dtype, int dest, int tag) = 0;
  virtual Status recv(void* buf, size_t count, DType dtype, int source, int tag) = 0;

  // Nonblocking forms with the same buffer shapes as above.
  virtual Result<Request> ibroadcast(void* buf, size_t count, DType dtype, int root) = 0;
  virtual Result<Request> iallreduce(const void* send, void* recv, size_t count, DType dtype,
                                     ReduceOp op) = 0;
  virtual Result<Request> ireduce_scatter(const void* send, void* recv, size_t recv_count,
                                          DType dtype, ReduceOp op) = 0;
  virtual Result<Request> iallgather(const void* send, void* recv, size_t send_count,
                                     DType dtype) = 0;
  virtual Result<Request> iallgatherv(const void* send, size_t send_count, void* recv,
                                      std::span<const size_t> recv_counts, DType dtype) = 0;
  virtual Result<Request> ialltoall(const void* send, void* recv, size_t count, DType dtype) = 0;
  virtual Result<Request> ialltoallv(const void* send, std::span<const size_t> send_counts,
                                     void* recv, std::span<const size_t> recv_counts,
                                     DType dtype) = 0;
  virtual Result<Request> isend(const void* buf, size_t count, DType dtype, int dest, int tag) = 0;
  virtual Result<Request> irecv(void* buf, size_t count, DType dtype, int source, int tag) = 0;

  // Collective over this group: members passing the same color form a new group, ordered by key
  // (ties by rank). A member passing kNoColor takes part but gets nullptr. `name` labels the
  // new group.
  static constexpr int kNoColor = -1;
  virtual Result<std::unique_ptr<Communicator>> split(int color, int key,
                                                      const std::string& name) = 0;
};

}  // namespace ms::comm
