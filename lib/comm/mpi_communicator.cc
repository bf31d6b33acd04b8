// MPI backend: process start-up, the bf16/f16 reduction operators, and Communicator over an
// owned MPI_Comm. Each collective is one MPI call wrapped by MS_MPI_CHECK and, when a watchdog is
// set, an InflightScope that publishes what this rank is blocked in.
#include "comm/mpi_communicator.h"

#include <cassert>
#include <chrono>
#include <climits>
#include <string>
#include <utility>

#include "comm/half_reduce.h"
#include "comm/mpi_check.h"
#include "core/logging.h"
#include "core/timer.h"

namespace ms::comm {
namespace {

constexpr int kThreadLevel = MPI_THREAD_SERIALIZED;

std::string thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "level " + std::to_string(level);
}

// ---- bf16 / f16 reduction operators ----

template <void (*Reduce)(ReduceOp, const uint16_t*, uint16_t*, size_t), ReduceOp Op>
void mpi_half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  Reduce(Op, static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout),
         static_cast<size_t>(*len));
}

// Indexed [format][op]: format 0 is bf16, 1 is f16; op follows ReduceOp's order.
MPI_User_function* const kHalfReduceFns[2][3] = {
    {&mpi_half_reduce<reduce_bf16, ReduceOp::kSum>, &mpi_half_reduce<reduce_bf16, ReduceOp::kMax>,
     &mpi_half_reduce<reduce_bf16, ReduceOp::kMin>},
    {&mpi_half_reduce<reduce_f16, ReduceOp::kSum>, &mpi_half_reduce<reduce_f16, ReduceOp::kMax>,
     &mpi_half_reduce<reduce_f16, ReduceOp::kMin>},
};

struct HalfReduceOps {
  MPI_Op ops[2][3];
  bool created = false;
};

HalfReduceOps& half_reduce_ops() {
  static HalfReduceOps ops;
  return ops;
}

Status create_half_reduce_ops() {
  HalfReduceOps& table = half_reduce_ops();
  if (table.created) return Status::OK();
  for (int format = 0; format < 2; ++format) {
    for (int op = 0; op < 3; ++op) {
      MS_MPI_CHECK(
          MPI_Op_create(kHalfReduceFns[format][op], /*commute=*/1, &table.ops[format][op]));
    }
  }
  table.created = true;
  return Status::OK();
}

Status free_half_reduce_ops() {
  HalfReduceOps& table = half_reduce_ops();
  if (!table.created) return Status::OK();
  table.created = false;
  for (auto& row : table.ops) {
    for (MPI_Op& op : row) MS_MPI_CHECK(MPI_Op_free(&op));
  }
  return Status::OK();
}

MPI_Op mpi_reduce_op(DType dtype, ReduceOp op) {
  const int index = static_cast<int>(op);
  if (dtype == DType::kBF16 || dtype == DType::kF16) {
    assert(half_reduce_ops().created && "ms::comm::init() registers the bf16/f16 operators");
    return half_reduce_ops().ops[dtype == DType::kBF16 ? 0 : 1][index];
  }
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

// ---- counts ----

Result<int> to_mpi_count(size_t count, const char* what) {
  if (count > static_cast<size_t>(INT_MAX)) {
    return InvalidArgument(std::string(what) + " of " + std::to_string(count) +
                           " elements exceeds MPI's int count limit; split the buffer");
  }
  return static_cast<int>(count);
}

// Per-rank counts and their prefix-sum displacements, as MPI's v-collectives take them:
// element r is the count of rank r, element size + r its displacement.
Result<std::vector<int>> counts_and_displacements(std::span<const size_t> counts, int size,
                                                  const std::string& what) {
  if (counts.size() != static_cast<size_t>(size)) {
    return InvalidArgument(what + " has " + std::to_string(counts.size()) +
                           " counts but the group has " + std::to_string(size) + " ranks");
  }
  std::vector<int> table(2 * counts.size());
  size_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    MS_ASSIGN_OR_RETURN(table[r], to_mpi_count(counts[r], what.c_str()));
    MS_ASSIGN_OR_RETURN(table[counts.size() + r], to_mpi_count(offset, what.c_str()));
    offset += counts[r];
  }
  return table;
}

uint64_t total_elements(std::span<const size_t> counts) {
  uint64_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

// Owns an MPI_Comm until released; frees it on early error returns.
class CommGuard {
 public:
  explicit CommGuard(MPI_Comm comm) : comm_(comm) {}
  ~CommGuard() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  CommGuard(const CommGuard&) = delete;
  CommGuard& operator=(const CommGuard&) = delete;
  MPI_Comm release() { return std::exchange(comm_, MPI_COMM_NULL); }

 private:
  MPI_Comm comm_;
};

Result<std::vector<int>> world_ranks_of(MPI_Comm comm, int size) {
  MPI_Group group;
  MPI_Group world_group;
  MS_MPI_CHECK(MPI_Comm_group(comm, &group));
  MS_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  std::vector<int> local(size);
  for (int r = 0; r < size; ++r) local[r] = r;
  std::vector<int> world(size);
  const int rc = MPI_Group_translate_ranks(group, size, local.data(), world_group, world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  MS_MPI_CHECK(rc);
  return world;
}

// Request over one MPI_Request. `keep_alive` holds the count/displacement arrays that MPI reads
// until a v-collective completes.
class MpiRequest final : public RequestImpl {
 public:
  MpiRequest(MPI_Request request, std::shared_ptr<Watchdog> watchdog, InflightOp op,
             std::vector<int> keep_alive)
      : request_(request),
        watchdog_(std::move(watchdog)),
        op_(std::move(op)),
        keep_alive_(std::move(keep_alive)) {}

  Status wait() override {
    if (watchdog_) {
      op_.start = std::chrono::steady_clock::now();
      op_.start_wall_s = wall_time_s();
    }
    InflightScope scope(watchdog_.get(), op_);
    MS_MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE));
    return Status::OK();
  }

  Result<bool> test() override {
    int done = 0;
    MS_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }

 private:
  MPI_Request request_;
  std::shared_ptr<Watchdog> watchdog_;
  InflightOp op_;
  std::vector<int> keep_alive_;
};

}  // namespace

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return "MPI error code " + std::to_string(code);
  }
  return std::string(text, static_cast<size_t>(length));
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kBF16: return MPI_UINT16_T;
    case DType::kF16: return MPI_UINT16_T;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kU16: return MPI_UINT16_T;
    case DType::kU8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

// ---- start-up ----

Status init(int& argc, char**& argv) {
  int already = 0;
  MPI_Initialized(&already);
  int provided = MPI_THREAD_SINGLE;
  if (already) {
    MS_MPI_CHECK(MPI_Query_thread(&provided));
  } else {
    MS_MPI_CHECK(MPI_Init_thread(&argc, &argv, kThreadLevel, &provided));
  }
  if (provided < kThreadLevel) {
    return FailedPrecondition("the MPI library provides " + thread_level_name(provided) +
                              " but the toolkit needs " + thread_level_name(kThreadLevel) +
                              " (one thread at a time calls MPI); use an MPI build with thread "
                              "support");
  }
  MS_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  int rank = 0;
  MS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  char host[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MS_MPI_CHECK(MPI_Get_processor_name(host, &length));
  log::set_identity(std::string(host, static_cast<size_t>(length)), rank);
  return create_half_reduce_ops();
}

Status finalize() {
  MS_RETURN_IF_ERROR(free_half_reduce_ops());
  int started = 0;
  int finished = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&finished);
  if (started && !finished) MS_MPI_CHECK(MPI_Finalize());
  return Status::OK();
}

bool initialized() {
  int finished = 0;
  MPI_Finalized(&finished);
  return half_reduce_ops().created && !finished;
}

// ---- construction ----

Result<std::unique_ptr<MpiCommunicator>> MpiCommunicator::world(const std::string& name) {
  if (!initialized()) {
    return FailedPrecondition(
        "ms::comm::init() has not run (or finalize() has); call it before creating '" + name + "'");
  }
  MPI_Comm dup = MPI_COMM_NULL;
  MS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  return adopt(dup, name);
}

Result<std::unique_ptr<MpiCommunicator>> MpiCommunicator::adopt(MPI_Comm comm,
                                                                const std::string& name) {
  CommGuard guard(comm);
  MS_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  int rank = 0;
  int size = 0;
  MS_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MS_MPI_CHECK(MPI_Comm_size(comm, &size));
  MS_ASSIGN_OR_RETURN(std::vector<int> world_ranks, world_ranks_of(comm, size));
  return std::unique_ptr<MpiCommunicator>(
      new MpiCommunicator(guard.release(), name, rank, size, std::move(world_ranks)));
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, int rank, int size,
                                 std::vector<int> world_ranks)
    : comm_(comm),
      name_(std::move(name)),
      rank_(rank),
      size_(size),
      world_ranks_(std::move(world_ranks)) {}

MpiCommunicator::~MpiCommunicator() {
  int finished = 0;
  MPI_Finalized(&finished);
  if (comm_ != MPI_COMM_NULL && !finished) MPI_Comm_free(&comm_);
}

void MpiCommunicator::set_watchdog(std::shared_ptr<Watchdog> watchdog) {
  watchdog_ = std::move(watchdog);
}

Result<std::unique_ptr<MpiCommunicator>> MpiCommunicator::split_mpi(int color, int key,
                                                                    const std::string& name) {
  if (color < 0 && color != kNoColor) {
    return InvalidArgument("split of group '" + name_ + "' into '" + name +
                           "': color must be >= 0 or kNoColor, got " + std::to_string(color));
  }
  MPI_Comm part = MPI_COMM_NULL;
  {
    InflightScope scope(watchdog(), next_collective("split", 0));
    MS_MPI_CHECK(MPI_Comm_split(comm_, color == kNoColor ? MPI_UNDEFINED : color, key, &part));
  }
  if (part == MPI_COMM_NULL) return std::unique_ptr<MpiCommunicator>();
  MS_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> child, adopt(part, name));
  child->set_watchdog(watchdog_);
  return child;
}

Result<std::unique_ptr<Communicator>> MpiCommunicator::split(int color, int key,
                                                             const std::string& name) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> child, split_mpi(color, key, name));
  return std::unique_ptr<Communicator>(std::move(child));
}

// ---- bookkeeping ----

InflightOp MpiCommunicator::next_collective(const char* op, uint64_t bytes) {
  const uint64_t seq = collective_seq_++;
  if (!watchdog_) return {};
  return make_inflight_op(op, name_, world_ranks_, seq, bytes);
}

InflightOp MpiCommunicator::next_p2p(const char* op, uint64_t bytes, int peer) {
  const uint64_t seq = p2p_seq_++;
  if (!watchdog_) return {};
  std::vector<int> ranks = {world_ranks_[rank_]};
  if (peer >= 0 && peer < size_) ranks.push_back(world_ranks_[peer]);
  return make_inflight_op(op, name_, std::move(ranks), seq, bytes);
}

Request MpiCommunicator::make_request(MPI_Request request, InflightOp op,
                                      std::vector<int> keep_alive) {
  return Request(
      std::make_unique<MpiRequest>(request, watchdog_, std::move(op), std::move(keep_alive)));
}

// ---- blocking operations ----

Status MpiCommunicator::barrier() {
  InflightScope scope(watchdog(), next_collective("barrier", 0));
  MS_MPI_CHECK(MPI_Barrier(comm_));
  return Status::OK();
}

Status MpiCommunicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(count, "broadcast"));
  InflightScope scope(watchdog(), next_collective("broadcast", count * dtype_size(dtype)));
  MS_MPI_CHECK(MPI_Bcast(buf, n, mpi_datatype(dtype), root, comm_));
  return Status::OK();
}

Status MpiCommunicator::allreduce(const void* send, void* recv, size_t count, DType dtype,
                                  ReduceOp op) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(count, "allreduce"));
  InflightScope scope(watchdog(), next_collective("allreduce", count * dtype_size(dtype)));
  const void* source = send == recv ? MPI_IN_PLACE : send;
  MS_MPI_CHECK(
      MPI_Allreduce(source, recv, n, mpi_datatype(dtype), mpi_reduce_op(dtype, op), comm_));
  return Status::OK();
}

Status MpiCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                       ReduceOp op) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(recv_count, "reduce_scatter"));
  const uint64_t bytes = recv_count * size_ * dtype_size(dtype);
  InflightScope scope(watchdog(), next_collective("reduce_scatter", bytes));
  const void* source = send == recv ? MPI_IN_PLACE : send;
  MS_MPI_CHECK(MPI_Reduce_scatter_block(source, recv, n, mpi_datatype(dtype),
                                        mpi_reduce_op(dtype, op), comm_));
  return Status::OK();
}

Status MpiCommunicator::allgather(const void* send, void* recv, size_t send_count, DType dtype) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(send_count, "allgather"));
  InflightScope scope(watchdog(), next_collective("allgather", send_count * dtype_size(dtype)));
  const MPI_Datatype type = mpi_datatype(dtype);
  const char* own_block = static_cast<const char*>(recv) + rank_ * send_count * dtype_size(dtype);
  const void* source = send == own_block ? MPI_IN_PLACE : send;
  MS_MPI_CHECK(MPI_Allgather(source, n, type, recv, n, type, comm_));
  return Status::OK();
}

Result<std::vector<int>> MpiCommunicator::allgatherv_table(
    size_t send_count, std::span<const size_t> recv_counts) const {
  MS_ASSIGN_OR_RETURN(std::vector<int> table,
                      counts_and_displacements(recv_counts, size_, "allgatherv recv_counts"));
  if (recv_counts[rank_] != send_count) {
    return InvalidArgument("allgatherv on group '" + name_ + "': rank " + std::to_string(rank_) +
                           " sends " + std::to_string(send_count) + " elements but recv_counts[" +
                           std::to_string(rank_) + "] is " + std::to_string(recv_counts[rank_]));
  }
  return table;
}

Status MpiCommunicator::allgatherv(const void* send, size_t send_count, void* recv,
                                   std::span<const size_t> recv_counts, DType dtype) {
  MS_ASSIGN_OR_RETURN(std::vector<int> table, allgatherv_table(send_count, recv_counts));
  InflightScope scope(watchdog(), next_collective("allgatherv", send_count * dtype_size(dtype)));
  const MPI_Datatype type = mpi_datatype(dtype);
  MS_MPI_CHECK(MPI_Allgatherv(send, table[rank_], type, recv, table.data(), table.data() + size_,
                              type, comm_));
  return Status::OK();
}

Status MpiCommunicator::alltoall(const void* send, void* recv, size_t count, DType dtype) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(count, "alltoall"));
  InflightScope scope(watchdog(), next_collective("alltoall", count * size_ * dtype_size(dtype)));
  const MPI_Datatype type = mpi_datatype(dtype);
  const void* source = send == recv ? MPI_IN_PLACE : send;
  MS_MPI_CHECK(MPI_Alltoall(source, n, type, recv, n, type, comm_));
  return Status::OK();
}

Status MpiCommunicator::alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                                  std::span<const size_t> recv_counts, DType dtype) {
  MS_ASSIGN_OR_RETURN(std::vector<int> sends,
                      counts_and_displacements(send_counts, size_, "alltoallv send_counts"));
  MS_ASSIGN_OR_RETURN(std::vector<int> recvs,
                      counts_and_displacements(recv_counts, size_, "alltoallv recv_counts"));
  const uint64_t bytes = total_elements(send_counts) * dtype_size(dtype);
  InflightScope scope(watchdog(), next_collective("alltoallv", bytes));
  const MPI_Datatype type = mpi_datatype(dtype);
  MS_MPI_CHECK(MPI_Alltoallv(send, sends.data(), sends.data() + size_, type, recv, recvs.data(),
                             recvs.data() + size_, type, comm_));
  return Status::OK();
}

Status MpiCommunicator::send(const void* buf, size_t count, DType dtype, int dest, int tag) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(count, "send"));
  InflightScope scope(watchdog(), next_p2p("send", count * dtype_size(dtype), dest));
  MS_MPI_CHECK(MPI_Send(buf, n, mpi_datatype(dtype), dest, tag, comm_));
  return Status::OK();
}

Status MpiCommunicator::recv(void* buf, size_t count, DType dtype, int source, int tag) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(count, "recv"));
  MPI_Status status;
  {
    InflightScope scope(watchdog(), next_p2p("recv", count * dtype_size(dtype), source));
    MS_MPI_CHECK(MPI_Recv(buf, n, mpi_datatype(dtype), source, tag, comm_, &status));
  }
  int received = 0;
  MS_MPI_CHECK(MPI_Get_count(&status, mpi_datatype(dtype), &received));
  if (received != n) {
    return CommError("recv on group '" + name_ + "' from rank " + std::to_string(source) + " tag " +
                     std::to_string(tag) + ": expected " + std::to_string(n) + " " +
                     std::string(dtype_name(dtype)) + " elements, got " + std::to_string(received) +
                     "; sender and receiver disagree on the size");
  }
  return Status::OK();
}

// ---- nonblocking operations ----

Result<Request> MpiCommunicator::ibroadcast(void* buf, size_t count, DType dtype, int root) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(count, "ibroadcast"));
  InflightOp op = next_collective("ibroadcast", count * dtype_size(dtype));
  MPI_Request request;
  MS_MPI_CHECK(MPI_Ibcast(buf, n, mpi_datatype(dtype), root, comm_, &request));
  return make_request(request, std::move(op));
}

Result<Request> MpiCommunicator::iallreduce(const void* send, void* recv, size_t count, DType dtype,
                                            ReduceOp op) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(count, "iallreduce"));
  InflightOp info = next_collective("iallreduce", count * dtype_size(dtype));
  const void* source = send == recv ? MPI_IN_PLACE : send;
  MPI_Request request;
  MS_MPI_CHECK(MPI_Iallreduce(source, recv, n, mpi_datatype(dtype), mpi_reduce_op(dtype, op), comm_,
                              &request));
  return make_request(request, std::move(info));
}

Result<Request> MpiCommunicator::ireduce_scatter(const void* send, void* recv, size_t recv_count,
                                                 DType dtype, ReduceOp op) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(recv_count, "ireduce_scatter"));
  InflightOp info = next_collective("ireduce_scatter", recv_count * size_ * dtype_size(dtype));
  MPI_Request request;
  MS_MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, n, mpi_datatype(dtype),
                                         mpi_reduce_op(dtype, op), comm_, &request));
  return make_request(request, std::move(info));
}

Result<Request> MpiCommunicator::iallgather(const void* send, void* recv, size_t send_count,
                                            DType dtype) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(send_count, "iallgather"));
  InflightOp op = next_collective("iallgather", send_count * dtype_size(dtype));
  const MPI_Datatype type = mpi_datatype(dtype);
  MPI_Request request;
  MS_MPI_CHECK(MPI_Iallgather(send, n, type, recv, n, type, comm_, &request));
  return make_request(request, std::move(op));
}

Result<Request> MpiCommunicator::ialltoall(const void* send, void* recv, size_t count,
                                           DType dtype) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(count, "ialltoall"));
  InflightOp op = next_collective("ialltoall", count * size_ * dtype_size(dtype));
  const MPI_Datatype type = mpi_datatype(dtype);
  MPI_Request request;
  MS_MPI_CHECK(MPI_Ialltoall(send, n, type, recv, n, type, comm_, &request));
  return make_request(request, std::move(op));
}

Result<Request> MpiCommunicator::iallgatherv(const void* send, size_t send_count, void* recv,
                                             std::span<const size_t> recv_counts, DType dtype) {
  MS_ASSIGN_OR_RETURN(std::vector<int> table, allgatherv_table(send_count, recv_counts));
  InflightOp op = next_collective("iallgatherv", send_count * dtype_size(dtype));
  const MPI_Datatype type = mpi_datatype(dtype);
  MPI_Request request;
  MS_MPI_CHECK(MPI_Iallgatherv(send, table[rank_], type, recv, table.data(), table.data() + size_,
                               type, comm_, &request));
  return make_request(request, std::move(op), std::move(table));
}

Result<Request> MpiCommunicator::ialltoallv(const void* send, std::span<const size_t> send_counts,
                                            void* recv, std::span<const size_t> recv_counts,
                                            DType dtype) {
  MS_ASSIGN_OR_RETURN(std::vector<int> table,
                      counts_and_displacements(send_counts, size_, "ialltoallv send_counts"));
  MS_ASSIGN_OR_RETURN(std::vector<int> recvs,
                      counts_and_displacements(recv_counts, size_, "ialltoallv recv_counts"));
  table.insert(table.end(), recvs.begin(), recvs.end());  // sends, send displs, recvs, displs
  InflightOp op = next_collective("ialltoallv", total_elements(send_counts) * dtype_size(dtype));
  const MPI_Datatype type = mpi_datatype(dtype);
  const int* t = table.data();
  MPI_Request request;
  MS_MPI_CHECK(MPI_Ialltoallv(send, t, t + size_, type, recv, t + 2 * size_, t + 3 * size_, type,
                              comm_, &request));
  return make_request(request, std::move(op), std::move(table));
}

Result<Request> MpiCommunicator::isend(const void* buf, size_t count, DType dtype, int dest,
                                       int tag) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(count, "isend"));
  InflightOp op = next_p2p("isend", count * dtype_size(dtype), dest);
  MPI_Request request;
  MS_MPI_CHECK(MPI_Isend(buf, n, mpi_datatype(dtype), dest, tag, comm_, &request));
  return make_request(request, std::move(op));
}

Result<Request> MpiCommunicator::irecv(void* buf, size_t count, DType dtype, int source, int tag) {
  MS_ASSIGN_OR_RETURN(const int n, to_mpi_count(count, "irecv"));
  InflightOp op = next_p2p("irecv", count * dtype_size(dtype), source);
  MPI_Request request;
  MS_MPI_CHECK(MPI_Irecv(buf, n, mpi_datatype(dtype), source, tag, comm_, &request));
  return make_request(request, std::move(op));
}

}  // namespace ms::comm
