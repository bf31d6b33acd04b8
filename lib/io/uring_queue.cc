// io_uring reads and writes with resubmission of short and interrupted transfers; see
// uring_queue.h.
#include "io/uring_queue.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

namespace ms::io {

namespace {

// io_uring lengths are 32-bit; larger transfers complete in several rounds.
constexpr size_t kMaxOpBytes = size_t{1} << 30;

bool is_retryable(int err) { return err == EINTR || err == EAGAIN; }

}  // namespace

struct UringQueue::Op {
  int fd;
  bool write;
  const std::string* path;
  uint64_t offset;
  std::byte* data;
  size_t size;
  size_t done = 0;
};

Result<std::unique_ptr<UringQueue>> UringQueue::create(unsigned depth) {
  std::unique_ptr<UringQueue> queue(new UringQueue(depth));
  int rc = io_uring_queue_init(depth, &queue->ring_, 0);
  if (rc < 0) {
    queue->depth_ = 0;  // nothing to tear down
    return Unavailable(std::string("io_uring_queue_init: ") + std::strerror(-rc));
  }
  io_uring_probe* probe = io_uring_get_probe_ring(&queue->ring_);
  bool supported = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_READ) &&
                   io_uring_opcode_supported(probe, IORING_OP_WRITE);
  if (probe != nullptr) io_uring_free_probe(probe);
  if (!supported) return Unavailable("io_uring lacks IORING_OP_READ/WRITE (kernel older than 5.6)");
  return queue;
}

UringQueue::~UringQueue() {
  if (depth_ > 0) io_uring_queue_exit(&ring_);
}

Result<size_t> UringQueue::read(int fd, const std::string& path, uint64_t offset,
                                std::span<std::byte> dest) {
  std::vector<Op> ops{Op{fd, false, &path, offset, dest.data(), dest.size()}};
  MS_RETURN_IF_ERROR(run(ops));
  return ops[0].done;
}

Status UringQueue::write(int fd, const std::string& path, uint64_t offset,
                         std::span<const std::byte> data) {
  // The kernel only reads from `data`; Op keeps one pointer type for both directions.
  std::vector<Op> ops{
      Op{fd, true, &path, offset, const_cast<std::byte*>(data.data()), data.size()}};
  return run(ops);
}

Status UringQueue::read_batch(int fd, const std::string& path, std::span<BatchRead> reads) {
  std::vector<Op> ops;
  ops.reserve(reads.size());
  for (const BatchRead& r : reads)
    ops.push_back(Op{fd, false, &path, r.offset, r.dest.data(), r.dest.size()});
  MS_RETURN_IF_ERROR(run(ops));
  for (size_t i = 0; i < reads.size(); ++i) reads[i].done = ops[i].done;
  return Status::OK();
}

// Keeps up to depth_ operations in flight until every one has finished. After the first error
// nothing new is submitted, but operations already in flight are reaped because they point into
// the caller's buffers.
Status UringQueue::run(std::vector<Op>& ops) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) return Internal("the io_uring queue failed earlier; restart the process");
  std::deque<size_t> pending;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].size > 0) pending.push_back(i);
  }
  size_t in_flight = 0;
  Status first_error;
  while (!pending.empty() || in_flight > 0) {
    if (!pending.empty()) {
      prepare(ops, pending, in_flight);
      Status submitted = submit(in_flight);
      if (!submitted.ok()) {
        broken_ = true;
        if (first_error.ok()) first_error = submitted;
        pending.clear();
        if (in_flight == 0) break;
      }
    }
    Status reaped = reap(ops, pending, in_flight);
    if (broken_) return reaped;
    if (!reaped.ok()) {
      if (first_error.ok()) first_error = reaped;
      pending.clear();
    }
  }
  return first_error;
}

void UringQueue::prepare(std::vector<Op>& ops, std::deque<size_t>& pending, size_t in_flight) {
  for (size_t queued = 0; !pending.empty() && in_flight + queued < depth_; ++queued) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return;
    size_t index = pending.front();
    pending.pop_front();
    Op& op = ops[index];
    unsigned len = static_cast<unsigned>(std::min(op.size - op.done, kMaxOpBytes));
    if (op.write) {
      io_uring_prep_write(sqe, op.fd, op.data + op.done, len, op.offset + op.done);
    } else {
      io_uring_prep_read(sqe, op.fd, op.data + op.done, len, op.offset + op.done);
    }
    io_uring_sqe_set_data64(sqe, index);
  }
}

// Hands prepared entries to the kernel. EINTR/EAGAIN/EBUSY with requests in flight is fine: the
// entries stay queued and go with the next submit, after completions have been reaped.
Status UringQueue::submit(size_t& in_flight) {
  for (;;) {
    int rc = io_uring_submit(&ring_);
    if (rc > 0) {
      in_flight += static_cast<size_t>(rc);
      return Status::OK();
    }
    if (rc == 0 && in_flight > 0) return Status::OK();
    if (rc == 0) return Internal("io_uring_submit accepted no requests");
    int err = -rc;
    if (err != EINTR && err != EAGAIN && err != EBUSY) {
      return Internal(std::string("io_uring_submit: ") + std::strerror(err));
    }
    if (in_flight > 0) return Status::OK();
  }
}

// Waits for at least one completion and processes all that are ready.
Status UringQueue::reap(std::vector<Op>& ops, std::deque<size_t>& pending, size_t& in_flight) {
  io_uring_cqe* cqe = nullptr;
  int rc;
  do {
    rc = io_uring_wait_cqe(&ring_, &cqe);
  } while (rc == -EINTR);
  if (rc < 0) {
    broken_ = true;
    return Internal(std::string("io_uring_wait_cqe: ") + std::strerror(-rc));
  }
  Status first_error;
  unsigned head = 0;
  unsigned seen = 0;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    size_t index = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
    Status status = complete(ops[index], index, cqe->res, pending);
    if (!status.ok() && first_error.ok()) first_error = status;
    ++seen;
  }
  io_uring_cq_advance(&ring_, seen);
  in_flight -= seen;
  return first_error;
}

// Accounts one completion: a partial transfer or an interruption goes back on `pending` for its
// remainder; a zero-byte read is end of file.
Status UringQueue::complete(Op& op, size_t index, int res, std::deque<size_t>& pending) {
  const char* verb = op.write ? "write" : "read";
  if (res < 0) {
    if (is_retryable(-res)) {
      pending.push_back(index);
      return Status::OK();
    }
    return ErrnoError(
        std::string(verb) + " at offset " + std::to_string(op.offset + op.done) + " of", *op.path,
        -res);
  }
  if (res == 0) {
    if (op.write) {
      return IOError("write at offset " + std::to_string(op.offset + op.done) + " of '" + *op.path +
                     "' made no progress");
    }
    return Status::OK();
  }
  op.done += static_cast<size_t>(res);
  if (op.done < op.size) pending.push_back(index);
  return Status::OK();
}

}  // namespace ms::io
