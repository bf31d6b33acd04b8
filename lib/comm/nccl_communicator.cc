// NCCL backend; see nccl_communicator.h. Uses the CUDA runtime API only, so a binary linking it
// starts on a machine without a GPU driver and create() reports Unavailable there.
#include "comm/nccl_communicator.h"

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "comm/agree.h"
#include "comm/mpi_check.h"
#include "core/cuda_check.h"
#include "core/timer.h"
#include "core/vendor_check.h"

namespace ms::comm {
namespace {

std::string nccl_error_text(ncclResult_t result) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return text;
}

}  // namespace
}  // namespace ms::comm

// The NCCL checking macro, on the shared vendor_error() shape; CUDA runtime calls go through
// MS_CUDA_CHECK (core/cuda_check.h), as in kernels/.
#define MS_NCCL_CHECK(call)                                                                        \
  do {                                                                                             \
    const ncclResult_t ms_nccl_rc_ = (call);                                                       \
    if (ms_nccl_rc_ != ncclSuccess) {                                                              \
      return ::ms::vendor_error("NCCL", #call, ::ms::comm::nccl_error_text(ms_nccl_rc_), __FILE__, \
                                __LINE__);                                                         \
    }                                                                                              \
  } while (0)

namespace ms::comm {
namespace {

Result<ncclDataType_t> nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU8: return ncclUint8;
    case DType::kU16: break;
  }
  return InvalidArgument("NCCL has no " + std::string(dtype_name(dtype)) +
                         " type; use the MPI communicator or another dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

// The number of CUDA devices; Unavailable when there is no device or driver.
Result<int> cuda_device_count() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    return vendor_error(
        "CUDA", "cudaGetDeviceCount(&count)",
        cuda_error_detail(error) + "; no usable CUDA device or driver, so NCCL is unavailable here",
        __FILE__, __LINE__, StatusCode::kUnavailable);
  }
  if (count == 0) return Unavailable("no CUDA device: cudaGetDeviceCount reports 0 devices");
  return count;
}

Result<int> node_local_rank(MpiCommunicator& group) {
  MPI_Comm node = MPI_COMM_NULL;
  MS_MPI_CHECK(MPI_Comm_split_type(group.handle(), MPI_COMM_TYPE_SHARED, group.rank(),
                                   MPI_INFO_NULL, &node));
  int rank = 0;
  const int rc = MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  MS_MPI_CHECK(rc);
  return rank;
}

Status nccl_async_error(ncclComm_t comm) {
  ncclResult_t async = ncclSuccess;
  MS_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess && async != ncclInProgress) {
    return vendor_error("NCCL", "ncclCommGetAsyncError(comm, &async)", nccl_error_text(async),
                        __FILE__, __LINE__);
  }
  return Status::OK();
}

// Polls `query` (cudaStreamQuery or cudaEventQuery) until the work is done, checking NCCL's
// asynchronous error state in between so a failed peer surfaces as a Status.
template <typename Query>
Status wait_until_done(ncclComm_t comm, Query query, const char* what) {
  while (true) {
    const cudaError_t error = query();
    if (error == cudaSuccess) return Status::OK();
    if (error != cudaErrorNotReady) {
      return cuda_error(error, what, __FILE__, __LINE__);
    }
    MS_RETURN_IF_ERROR(nccl_async_error(comm));
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// The first failure of the calls inside an ncclGroupStart/ncclGroupEnd pair, or of the end.
Status group_result(ncclResult_t first, ncclResult_t end, const char* what) {
  const ncclResult_t failed = first != ncclSuccess ? first : end;
  if (failed == ncclSuccess) return Status::OK();
  return vendor_error("NCCL", what, nccl_error_text(failed), __FILE__, __LINE__);
}

Status check_counts(std::span<const size_t> counts, int size, const std::string& what) {
  if (counts.size() == static_cast<size_t>(size)) return Status::OK();
  return InvalidArgument(what + " has " + std::to_string(counts.size()) +
                         " counts but the group has " + std::to_string(size) + " ranks");
}

uint64_t total_elements(std::span<const size_t> counts) {
  uint64_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

class NcclRequest final : public RequestImpl {
 public:
  NcclRequest(cudaEvent_t event, ncclComm_t comm, std::shared_ptr<Watchdog> watchdog, InflightOp op)
      : event_(event), comm_(comm), watchdog_(std::move(watchdog)), op_(std::move(op)) {}
  ~NcclRequest() override { cudaEventDestroy(event_); }

  Status wait() override {
    op_.start = std::chrono::steady_clock::now();
    op_.start_wall_s = wall_time_s();
    InflightScope scope(watchdog_.get(), op_);
    return wait_until_done(
        comm_, [this] { return cudaEventQuery(event_); }, "cudaEventQuery(event)");
  }

  Result<bool> test() override {
    const cudaError_t error = cudaEventQuery(event_);
    if (error == cudaSuccess) return true;
    if (error != cudaErrorNotReady) {
      return cuda_error(error, "cudaEventQuery(event)", __FILE__, __LINE__);
    }
    MS_RETURN_IF_ERROR(nccl_async_error(comm_));
    return false;
  }

 private:
  cudaEvent_t event_;
  ncclComm_t comm_;
  std::shared_ptr<Watchdog> watchdog_;
  InflightOp op_;
};

}  // namespace

// ---- construction ----

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(MpiCommunicator& bootstrap,
                                                                   const std::string& name) {
  Result<int> devices = cuda_device_count();
  MS_RETURN_IF_ERROR(agree(bootstrap, devices.status(), "finding a CUDA device for NCCL"));
  MS_ASSIGN_OR_RETURN(const int local_rank, node_local_rank(bootstrap));
  MS_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> own,
                      bootstrap.split_mpi(0, bootstrap.rank(), name));
  return create_owned(std::move(own), local_rank % *devices);
}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create_owned(
    std::unique_ptr<MpiCommunicator> bootstrap, int device) {
  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator(std::move(bootstrap), device));
  MS_RETURN_IF_ERROR(comm->init_nccl());
  return comm;
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<MpiCommunicator> bootstrap, int device)
    : bootstrap_(std::move(bootstrap)), device_(device) {}

Status NcclCommunicator::create_stream() {
  MS_CUDA_CHECK(cudaSetDevice(device_));
  MS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MS_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(float)));
  MS_CUDA_CHECK(cudaMemsetAsync(scratch_, 0, sizeof(float), stream_));
  return Status::OK();
}

Status NcclCommunicator::init_nccl() {
  MS_RETURN_IF_ERROR(agree(*bootstrap_, create_stream(), "setting up the CUDA stream"));
  ncclUniqueId id{};
  Status made_id = Status::OK();
  if (rank() == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      made_id =
          vendor_error("NCCL", "ncclGetUniqueId(&id)", nccl_error_text(result), __FILE__, __LINE__);
    }
  }
  MS_RETURN_IF_ERROR(agree(*bootstrap_, made_id, "ncclGetUniqueId"));
  MS_RETURN_IF_ERROR(bootstrap_->broadcast(&id, sizeof(id), DType::kU8, 0));
  MS_NCCL_CHECK(ncclCommInitRank(&comm_, size(), id, rank()));
  return Status::OK();
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t queried = ncclCommGetAsyncError(comm_, &async);
    if (queried != ncclSuccess || async != ncclSuccess) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void NcclCommunicator::set_watchdog(std::shared_ptr<Watchdog> watchdog) {
  watchdog_ = std::move(watchdog);
}

Result<std::unique_ptr<Communicator>> NcclCommunicator::split(int color, int key,
                                                              const std::string& name) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> part,
                      bootstrap_->split_mpi(color, key, name));
  if (part == nullptr) return std::unique_ptr<Communicator>();
  MS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> child,
                      create_owned(std::move(part), device_));
  child->set_watchdog(watchdog_);
  return std::unique_ptr<Communicator>(std::move(child));
}

// ---- bookkeeping ----

InflightOp NcclCommunicator::next_collective(const char* op, uint64_t bytes) {
  const uint64_t seq = collective_seq_++;
  if (!watchdog_) return {};
  return make_inflight_op(op, name(), world_ranks(), seq, bytes);
}

InflightOp NcclCommunicator::next_p2p(const char* op, uint64_t bytes, int peer) {
  const uint64_t seq = p2p_seq_++;
  if (!watchdog_) return {};
  std::vector<int> ranks = {world_ranks()[rank()]};
  if (peer >= 0 && peer < size()) ranks.push_back(world_ranks()[peer]);
  return make_inflight_op(op, name(), std::move(ranks), seq, bytes);
}

Status NcclCommunicator::finish(InflightOp op) {
  InflightScope scope(watchdog_.get(), std::move(op));
  return wait_until_done(
      comm_, [this] { return cudaStreamQuery(stream_); }, "cudaStreamQuery(stream)");
}

Result<Request> NcclCommunicator::make_request(InflightOp op) {
  cudaEvent_t event = nullptr;
  MS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(event, stream_);
  if (recorded != cudaSuccess) {
    cudaEventDestroy(event);
    return cuda_error(recorded, "cudaEventRecord(event, stream_)", __FILE__, __LINE__);
  }
  return Request(std::make_unique<NcclRequest>(event, comm_, watchdog_, std::move(op)));
}

// ---- enqueueing ----

Status NcclCommunicator::enqueue_broadcast(void* buf, size_t count, DType dtype, int root) {
  MS_ASSIGN_OR_RETURN(const ncclDataType_t type, nccl_type(dtype));
  MS_NCCL_CHECK(ncclBroadcast(buf, buf, count, type, root, comm_, stream_));
  return Status::OK();
}

Status NcclCommunicator::enqueue_allreduce(const void* send, void* recv, size_t count, DType dtype,
                                           ReduceOp op) {
  MS_ASSIGN_OR_RETURN(const ncclDataType_t type, nccl_type(dtype));
  MS_NCCL_CHECK(ncclAllReduce(send, recv, count, type, nccl_op(op), comm_, stream_));
  return Status::OK();
}

Status NcclCommunicator::enqueue_reduce_scatter(const void* send, void* recv, size_t recv_count,
                                                DType dtype, ReduceOp op) {
  MS_ASSIGN_OR_RETURN(const ncclDataType_t type, nccl_type(dtype));
  MS_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, type, nccl_op(op), comm_, stream_));
  return Status::OK();
}

Status NcclCommunicator::enqueue_allgather(const void* send, void* recv, size_t send_count,
                                           DType dtype) {
  MS_ASSIGN_OR_RETURN(const ncclDataType_t type, nccl_type(dtype));
  MS_NCCL_CHECK(ncclAllGather(send, recv, send_count, type, comm_, stream_));
  return Status::OK();
}

// One broadcast per rank, rooted at that rank, into its block of recv.
Status NcclCommunicator::enqueue_allgatherv(const void* send, size_t send_count, void* recv,
                                            std::span<const size_t> recv_counts, DType dtype) {
  MS_ASSIGN_OR_RETURN(const ncclDataType_t type, nccl_type(dtype));
  MS_RETURN_IF_ERROR(check_counts(recv_counts, size(), "allgatherv recv_counts"));
  if (recv_counts[rank()] != send_count) {
    return InvalidArgument("allgatherv on group '" + name() + "': rank " + std::to_string(rank()) +
                           " sends " + std::to_string(send_count) + " elements but recv_counts[" +
                           std::to_string(rank()) + "] is " + std::to_string(recv_counts[rank()]));
  }
  auto* out = static_cast<char*>(recv);
  ncclResult_t first = ncclGroupStart();
  size_t offset = 0;
  for (int r = 0; r < size(); ++r) {
    const ncclResult_t result = ncclBroadcast(send, out + offset * dtype_size(dtype),
                                              recv_counts[r], type, r, comm_, stream_);
    if (first == ncclSuccess) first = result;
    offset += recv_counts[r];
  }
  return group_result(first, ncclGroupEnd(), "ncclBroadcast group of allgatherv");
}

// One send and one receive per peer, grouped so NCCL runs them together.
Status NcclCommunicator::enqueue_alltoallv(const void* send, std::span<const size_t> send_counts,
                                           void* recv, std::span<const size_t> recv_counts,
                                           DType dtype) {
  MS_ASSIGN_OR_RETURN(const ncclDataType_t type, nccl_type(dtype));
  MS_RETURN_IF_ERROR(check_counts(send_counts, size(), "alltoallv send_counts"));
  MS_RETURN_IF_ERROR(check_counts(recv_counts, size(), "alltoallv recv_counts"));
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  const size_t element = dtype_size(dtype);
  ncclResult_t first = ncclGroupStart();
  size_t send_offset = 0;
  size_t recv_offset = 0;
  for (int r = 0; r < size(); ++r) {
    const ncclResult_t sent =
        ncclSend(in + send_offset * element, send_counts[r], type, r, comm_, stream_);
    const ncclResult_t received =
        ncclRecv(out + recv_offset * element, recv_counts[r], type, r, comm_, stream_);
    if (first == ncclSuccess) first = sent != ncclSuccess ? sent : received;
    send_offset += send_counts[r];
    recv_offset += recv_counts[r];
  }
  return group_result(first, ncclGroupEnd(), "ncclSend/ncclRecv group of alltoallv");
}

Status NcclCommunicator::enqueue_send(const void* buf, size_t count, DType dtype, int dest) {
  MS_ASSIGN_OR_RETURN(const ncclDataType_t type, nccl_type(dtype));
  MS_NCCL_CHECK(ncclSend(buf, count, type, dest, comm_, stream_));
  return Status::OK();
}

Status NcclCommunicator::enqueue_recv(void* buf, size_t count, DType dtype, int source) {
  MS_ASSIGN_OR_RETURN(const ncclDataType_t type, nccl_type(dtype));
  MS_NCCL_CHECK(ncclRecv(buf, count, type, source, comm_, stream_));
  return Status::OK();
}

// ---- blocking operations: enqueue, then wait for the stream ----

Status NcclCommunicator::barrier() {
  InflightOp op = next_collective("barrier", 0);
  MS_RETURN_IF_ERROR(enqueue_allreduce(scratch_, scratch_, 1, DType::kF32, ReduceOp::kSum));
  return finish(std::move(op));
}

Status NcclCommunicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  InflightOp op = next_collective("broadcast", count * dtype_size(dtype));
  MS_RETURN_IF_ERROR(enqueue_broadcast(buf, count, dtype, root));
  return finish(std::move(op));
}

Status NcclCommunicator::allreduce(const void* send, void* recv, size_t count, DType dtype,
                                   ReduceOp op) {
  InflightOp info = next_collective("allreduce", count * dtype_size(dtype));
  MS_RETURN_IF_ERROR(enqueue_allreduce(send, recv, count, dtype, op));
  return finish(std::move(info));
}

Status NcclCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                        DType dtype, ReduceOp op) {
  InflightOp info = next_collective("reduce_scatter", recv_count * size() * dtype_size(dtype));
  MS_RETURN_IF_ERROR(enqueue_reduce_scatter(send, recv, recv_count, dtype, op));
  return finish(std::move(info));
}

Status NcclCommunicator::allgather(const void* send, void* recv, size_t send_count, DType dtype) {
  InflightOp op = next_collective("allgather", send_count * dtype_size(dtype));
  MS_RETURN_IF_ERROR(enqueue_allgather(send, recv, send_count, dtype));
  return finish(std::move(op));
}

Status NcclCommunicator::allgatherv(const void* send, size_t send_count, void* recv,
                                    std::span<const size_t> recv_counts, DType dtype) {
  InflightOp op = next_collective("allgatherv", send_count * dtype_size(dtype));
  MS_RETURN_IF_ERROR(enqueue_allgatherv(send, send_count, recv, recv_counts, dtype));
  return finish(std::move(op));
}

Status NcclCommunicator::alltoall(const void* send, void* recv, size_t count, DType dtype) {
  InflightOp op = next_collective("alltoall", count * size() * dtype_size(dtype));
  const std::vector<size_t> counts(size(), count);
  MS_RETURN_IF_ERROR(enqueue_alltoallv(send, counts, recv, counts, dtype));
  return finish(std::move(op));
}

Status NcclCommunicator::alltoallv(const void* send, std::span<const size_t> send_counts,
                                   void* recv, std::span<const size_t> recv_counts, DType dtype) {
  InflightOp op = next_collective("alltoallv", total_elements(send_counts) * dtype_size(dtype));
  MS_RETURN_IF_ERROR(enqueue_alltoallv(send, send_counts, recv, recv_counts, dtype));
  return finish(std::move(op));
}

Status NcclCommunicator::send(const void* buf, size_t count, DType dtype, int dest, int) {
  InflightOp op = next_p2p("send", count * dtype_size(dtype), dest);
  MS_RETURN_IF_ERROR(enqueue_send(buf, count, dtype, dest));
  return finish(std::move(op));
}

Status NcclCommunicator::recv(void* buf, size_t count, DType dtype, int source, int) {
  InflightOp op = next_p2p("recv", count * dtype_size(dtype), source);
  MS_RETURN_IF_ERROR(enqueue_recv(buf, count, dtype, source));
  return finish(std::move(op));
}

// ---- nonblocking operations: enqueue, then hand out an event ----

Result<Request> NcclCommunicator::ibroadcast(void* buf, size_t count, DType dtype, int root) {
  InflightOp op = next_collective("ibroadcast", count * dtype_size(dtype));
  MS_RETURN_IF_ERROR(enqueue_broadcast(buf, count, dtype, root));
  return make_request(std::move(op));
}

Result<Request> NcclCommunicator::iallreduce(const void* send, void* recv, size_t count,
                                             DType dtype, ReduceOp op) {
  InflightOp info = next_collective("iallreduce", count * dtype_size(dtype));
  MS_RETURN_IF_ERROR(enqueue_allreduce(send, recv, count, dtype, op));
  return make_request(std::move(info));
}

Result<Request> NcclCommunicator::ireduce_scatter(const void* send, void* recv, size_t recv_count,
                                                  DType dtype, ReduceOp op) {
  InflightOp info = next_collective("ireduce_scatter", recv_count * size() * dtype_size(dtype));
  MS_RETURN_IF_ERROR(enqueue_reduce_scatter(send, recv, recv_count, dtype, op));
  return make_request(std::move(info));
}

Result<Request> NcclCommunicator::iallgather(const void* send, void* recv, size_t send_count,
                                             DType dtype) {
  InflightOp op = next_collective("iallgather", send_count * dtype_size(dtype));
  MS_RETURN_IF_ERROR(enqueue_allgather(send, recv, send_count, dtype));
  return make_request(std::move(op));
}

Result<Request> NcclCommunicator::iallgatherv(const void* send, size_t send_count, void* recv,
                                              std::span<const size_t> recv_counts, DType dtype) {
  InflightOp op = next_collective("iallgatherv", send_count * dtype_size(dtype));
  MS_RETURN_IF_ERROR(enqueue_allgatherv(send, send_count, recv, recv_counts, dtype));
  return make_request(std::move(op));
}

Result<Request> NcclCommunicator::ialltoall(const void* send, void* recv, size_t count,
                                            DType dtype) {
  InflightOp op = next_collective("ialltoall", count * size() * dtype_size(dtype));
  const std::vector<size_t> counts(size(), count);
  MS_RETURN_IF_ERROR(enqueue_alltoallv(send, counts, recv, counts, dtype));
  return make_request(std::move(op));
}

Result<Request> NcclCommunicator::ialltoallv(const void* send, std::span<const size_t> send_counts,
                                             void* recv, std::span<const size_t> recv_counts,
                                             DType dtype) {
  InflightOp op = next_collective("ialltoallv", total_elements(send_counts) * dtype_size(dtype));
  MS_RETURN_IF_ERROR(enqueue_alltoallv(send, send_counts, recv, recv_counts, dtype));
  return make_request(std::move(op));
}

Result<Request> NcclCommunicator::isend(const void* buf, size_t count, DType dtype, int dest, int) {
  InflightOp op = next_p2p("isend", count * dtype_size(dtype), dest);
  MS_RETURN_IF_ERROR(enqueue_send(buf, count, dtype, dest));
  return make_request(std::move(op));
}

Result<Request> NcclCommunicator::irecv(void* buf, size_t count, DType dtype, int source, int) {
  InflightOp op = next_p2p("irecv", count * dtype_size(dtype), source);
  MS_RETURN_IF_ERROR(enqueue_recv(buf, count, dtype, source));
  return make_request(std::move(op));
}

}  // namespace ms::comm
