// Chunked tensor-parallel collectives overlapped with the caller's compute (tp_overlap.h).
// Each primitive keeps at most two chunks' buffers (double buffering: a buffer is reused only
// after the request that reads or writes it completed) and times every communication call, so a
// run reports how much of its communication the compute hid.
#include "parallel/tp_overlap.h"

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "core/timer.h"
#include "ops/device_array.h"

namespace ms::parallel {

int tp_chunk_count(int chunks, int64_t rows) {
  if (rows <= 0) return 0;
  return static_cast<int>(std::clamp<int64_t>(chunks, 1, rows));
}

TpChunk tp_chunk(int64_t rows, int chunks, int c) {
  const int64_t base = rows / chunks;
  const int64_t extra = rows % chunks;
  return {c * base + std::min<int64_t>(c, extra), base + (c < extra ? 1 : 0)};
}

namespace {

// One collective of a call. Declared after the buffers it uses, so that on an early return its
// Request (whose destructor waits) is destroyed before them.
struct InFlight {
  comm::Request request;
  uint64_t bytes = 0;
  double t0 = 0;
  bool pending = false;
};

// The accounting of one call: every issue, test and wait is timed as exposed, completions go
// to on_comm, and the call's totals to overlap.stats at finish().
class CallClock {
 public:
  CallClock(const TpOverlap& overlap, const char* op) : overlap_(overlap), op_(op) {}

  // Starts a collective with start() (returning Result<comm::Request>) as `f`.
  template <typename Start>
  Status issue(InFlight& f, uint64_t bytes, Start start) {
    const double t0 = wall_time_s();
    Result<comm::Request> request = start();
    const double t1 = wall_time_s();
    stats_.exposed_s += t1 - t0;
    MS_RETURN_IF_ERROR(request.status());
    if (stats_.collectives == 0) first_issue_ = t0;
    ++stats_.collectives;
    stats_.bytes += bytes;
    f = {std::move(request).value(), bytes, t0, true};
    return Status::OK();
  }

  // Lets the transport progress `f` (OpenMPI moves a collective only inside MPI calls).
  Status poll(InFlight& f) {
    if (!f.pending) return Status::OK();
    const double t0 = wall_time_s();
    Result<bool> done = f.request.test();
    const double t1 = wall_time_s();
    stats_.exposed_s += t1 - t0;
    MS_RETURN_IF_ERROR(done.status());
    if (*done) completed(f, t1);
    return Status::OK();
  }

  Status poll_all(std::vector<InFlight>& flights) {
    for (InFlight& f : flights) MS_RETURN_IF_ERROR(poll(f));
    return Status::OK();
  }

  Status wait(InFlight& f) {
    if (!f.pending) return Status::OK();
    const double t0 = wall_time_s();
    const Status status = f.request.wait();
    const double t1 = wall_time_s();
    stats_.exposed_s += t1 - t0;
    MS_RETURN_IF_ERROR(status);
    completed(f, t1);
    return Status::OK();
  }

  void finish() {
    if (stats_.collectives > 0) stats_.active_s = last_done_ - first_issue_;
    if (overlap_.stats != nullptr) overlap_.stats->add(stats_);
  }

 private:
  void completed(InFlight& f, double t1) {
    f.pending = false;
    last_done_ = std::max(last_done_, t1);
    if (overlap_.on_comm) overlap_.on_comm(op_, f.bytes, f.t0, t1);
  }

  const TpOverlap& overlap_;
  const char* op_;
  CommStats stats_;
  double first_issue_ = 0;
  double last_done_ = 0;
};

// The checks every rank makes alike before communicating. The count one collective takes is a
// chunk's m * width elements, which must fit an int (MPI's count type).
Status check_call(const char* what, const TpOverlap& overlap, int64_t rows, int64_t width,
                  bool has_callback, const void* buffer) {
  const std::string name = what;
  if (overlap.chunks < 1) {
    return InvalidArgument(name + ": chunks must be at least 1, got " +
                           std::to_string(overlap.chunks));
  }
  if (rows < 0 || width < 1) {
    return InvalidArgument(name + " needs rows >= 0 and width >= 1, got rows " +
                           std::to_string(rows) + ", width " + std::to_string(width));
  }
  if (!has_callback) return InvalidArgument(name + ": no compute callback given");
  if (rows > 0 && buffer == nullptr) return InvalidArgument(name + ": null buffer");
  const int count = tp_chunk_count(overlap.chunks, rows);
  if (count > 0 && tp_chunk(rows, count, 0).rows > INT_MAX / width) {
    return InvalidArgument(name + ": a chunk of " + std::to_string(tp_chunk(rows, count, 0).rows) +
                           " rows of width " + std::to_string(width) +
                           " exceeds the 2^31 - 1 elements one collective can carry; use more "
                           "chunks");
  }
  return Status::OK();
}

constexpr uint64_t kF32Bytes = sizeof(float);

// The in-flight collectives tp_overlap_poll() reaches while a callback runs, and the first
// error a poll met (returned by the chunked call after the callback).
struct ActiveCall {
  CallClock& clock;
  std::vector<InFlight>& flights;
  Status error;
};

thread_local ActiveCall* active_call = nullptr;

// Runs callback() with `call` reachable by tp_overlap_poll() (the previous one restored after,
// so a chunked call inside a callback nests); returns the first error a poll met.
class ActiveCallScope {
 public:
  explicit ActiveCallScope(ActiveCall& call) : previous_(active_call) { active_call = &call; }
  ~ActiveCallScope() { active_call = previous_; }
  ActiveCallScope(const ActiveCallScope&) = delete;
  ActiveCallScope& operator=(const ActiveCallScope&) = delete;

 private:
  ActiveCall* previous_;
};

template <typename Callback>
Status run_callback(ActiveCall& call, Callback callback) {
  {
    ActiveCallScope scope(call);
    callback();
  }
  return call.error;
}

}  // namespace

Status tp_overlap_poll() {
  if (active_call == nullptr) return Status::OK();
  Status status = active_call->clock.poll_all(active_call->flights);
  if (!status.ok() && active_call->error.ok()) active_call->error = status;
  return status;
}

Status chunked_allgather(comm::Communicator& tp, const TpOverlap& overlap, const float* x_local,
                         int64_t n_local, int64_t width, const TpGatherConsumer& consume) {
  MS_RETURN_IF_ERROR(check_call("chunked_allgather", overlap, n_local, width,
                                static_cast<bool>(consume), x_local));
  const int count = tp_chunk_count(overlap.chunks, n_local);
  if (count == 0) return Status::OK();
  const size_t ranks = static_cast<size_t>(tp.size());
  const size_t capacity = ranks * static_cast<size_t>(tp_chunk(n_local, count, 0).rows * width);
  ops::DeviceArray recv[2];
  recv[0].resize(*overlap.backend, capacity);
  recv[1].resize(*overlap.backend, count > 1 ? capacity : 0);
  CallClock clock(overlap, "allgather");
  std::vector<InFlight> flights(2);
  ActiveCall call{clock, flights, Status::OK()};
  const auto start = [&](int c) {
    const TpChunk k = tp_chunk(n_local, count, c);
    const size_t elements = static_cast<size_t>(k.rows * width);
    float* into = recv[c % 2].data();
    return clock.issue(flights[c % 2], ranks * elements * kF32Bytes, [&, k, elements, into] {
      return tp.iallgather(x_local + k.row0 * width, into, elements, DType::kF32);
    });
  };
  MS_RETURN_IF_ERROR(start(0));
  for (int c = 0; c < count; ++c) {
    // Buffer (c + 1) % 2 last held chunk c - 1, which consume has finished with.
    if (c + 1 < count) MS_RETURN_IF_ERROR(start(c + 1));
    MS_RETURN_IF_ERROR(clock.wait(flights[c % 2]));
    const TpChunk k = tp_chunk(n_local, count, c);
    MS_RETURN_IF_ERROR(
        run_callback(call, [&] { consume(recv[c % 2].data(), k.rows, k.row0); }));
    MS_RETURN_IF_ERROR(clock.poll_all(flights));
  }
  clock.finish();
  return Status::OK();
}

Status chunked_reduce_scatter(comm::Communicator& tp, const TpOverlap& overlap, int64_t n_local,
                              int64_t width, const TpChunkProducer& produce, float* y_local) {
  MS_RETURN_IF_ERROR(check_call("chunked_reduce_scatter", overlap, n_local, width,
                                static_cast<bool>(produce), y_local));
  const int count = tp_chunk_count(overlap.chunks, n_local);
  if (count == 0) return Status::OK();
  const size_t ranks = static_cast<size_t>(tp.size());
  const size_t capacity = ranks * static_cast<size_t>(tp_chunk(n_local, count, 0).rows * width);
  // Separate from y_local: MPI and NCCL define an in-place reduce-scatter differently.
  ops::DeviceArray send[2];
  send[0].resize(*overlap.backend, capacity);
  send[1].resize(*overlap.backend, count > 1 ? capacity : 0);
  CallClock clock(overlap, "reduce_scatter");
  std::vector<InFlight> flights(2);
  ActiveCall call{clock, flights, Status::OK()};
  for (int c = 0; c < count; ++c) {
    // send[c % 2] was read by chunk c - 2's reduce-scatter: it must be done before refilling.
    MS_RETURN_IF_ERROR(clock.wait(flights[c % 2]));
    const TpChunk k = tp_chunk(n_local, count, c);
    float* partial = send[c % 2].data();
    MS_RETURN_IF_ERROR(run_callback(call, [&] { produce(partial, k.rows, k.row0); }));
    MS_RETURN_IF_ERROR(clock.poll_all(flights));
    const size_t elements = static_cast<size_t>(k.rows * width);
    MS_RETURN_IF_ERROR(clock.issue(flights[c % 2], ranks * elements * kF32Bytes, [&] {
      return tp.ireduce_scatter(partial, y_local + k.row0 * width, elements, DType::kF32,
                                comm::ReduceOp::kSum);
    }));
  }
  for (int c = std::max(0, count - 2); c < count; ++c) {
    MS_RETURN_IF_ERROR(clock.wait(flights[c % 2]));
  }
  clock.finish();
  return Status::OK();
}

Status chunked_allreduce(comm::Communicator& tp, const TpOverlap& overlap, int64_t n,
                         int64_t width, const TpChunkProducer& produce, float* y) {
  MS_RETURN_IF_ERROR(
      check_call("chunked_allreduce", overlap, n, width, static_cast<bool>(produce), y));
  const int count = tp_chunk_count(overlap.chunks, n);
  if (count == 0) return Status::OK();
  CallClock clock(overlap, "allreduce");
  // Each chunk reduces its own rows of y in place, so every chunk may be in flight at once.
  std::vector<InFlight> flights(static_cast<size_t>(count));
  ActiveCall call{clock, flights, Status::OK()};
  for (int c = 0; c < count; ++c) {
    const TpChunk k = tp_chunk(n, count, c);
    float* rows = y + k.row0 * width;
    MS_RETURN_IF_ERROR(run_callback(call, [&] { produce(rows, k.rows, k.row0); }));
    MS_RETURN_IF_ERROR(clock.poll_all(flights));
    const size_t elements = static_cast<size_t>(k.rows * width);
    MS_RETURN_IF_ERROR(clock.issue(flights[c], elements * kF32Bytes, [&] {
      return tp.iallreduce(rows, rows, elements, DType::kF32, comm::ReduceOp::kSum);
    }));
  }
  for (InFlight& f : flights) MS_RETURN_IF_ERROR(clock.wait(f));
  clock.finish();
  return Status::OK();
}

Status tp_blocking(const TpOverlap& overlap, const char* op, uint64_t bytes,
                   const std::function<Status()>& run) {
  const double t0 = wall_time_s();
  Status status = run();
  const double t1 = wall_time_s();
  if (overlap.stats != nullptr) {
    ++overlap.stats->collectives;
    overlap.stats->bytes += bytes;
    overlap.stats->active_s += t1 - t0;
    overlap.stats->exposed_s += t1 - t0;
  }
  if (overlap.on_comm) overlap.on_comm(op, bytes, t0, t1);
  return status;
}

Status tp_allreduce(comm::Communicator& tp, const TpOverlap& overlap, float* data,
                    int64_t count) {
  return tp_blocking(overlap, "allreduce", static_cast<uint64_t>(count) * sizeof(float), [&] {
    return tp.allreduce(data, data, static_cast<size_t>(count), DType::kF32,
                        comm::ReduceOp::kSum);
  });
}

}  // namespace ms::parallel
