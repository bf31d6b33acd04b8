// An io_uring submission/completion queue used by the default Env for reads and writes. Every
// request is resubmitted for its remainder after a short transfer or -EINTR/-EAGAIN, so callers
// see the same contract as the pread/pwrite loops in posix_io.h. One ring serves the process,
// guarded by a mutex; batching (submit_batch) is where io_uring pays off, e.g. loading many
// checkpoint shards at once.
#pragma once

#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace ms::io {

class UringQueue {
 public:
  // Sets up a ring of `depth` entries and checks that read and write operations are supported.
  // Unavailable with the reason (e.g. "io_uring_queue_init: Operation not permitted") otherwise.
  static Result<std::unique_ptr<UringQueue>> create(unsigned depth);
  ~UringQueue();
  UringQueue(const UringQueue&) = delete;
  UringQueue& operator=(const UringQueue&) = delete;

  // Reads until dest is full or end of file; returns the count. IOError naming `path`.
  Result<size_t> read(int fd, const std::string& path, uint64_t offset, std::span<std::byte> dest);
  // Writes all of data; IOError naming `path` (a prefix may have been written).
  Status write(int fd, const std::string& path, uint64_t offset, std::span<const std::byte> data);

  // One read of a batch; `done` is filled in with the bytes read (short only at end of file).
  struct BatchRead {
    uint64_t offset;
    std::span<std::byte> dest;
    size_t done = 0;
  };
  // Submits all reads together (in groups of the ring depth) and waits for all of them.
  Status read_batch(int fd, const std::string& path, std::span<BatchRead> reads);

 private:
  struct Op;
  explicit UringQueue(unsigned depth) : depth_(depth) {}
  Status run(std::vector<Op>& ops);
  void prepare(std::vector<Op>& ops, std::deque<size_t>& pending, size_t in_flight);
  Status submit(size_t& in_flight);
  Status reap(std::vector<Op>& ops, std::deque<size_t>& pending, size_t& in_flight);
  static Status complete(Op& op, size_t index, int res, std::deque<size_t>& pending);

  unsigned depth_;
  io_uring ring_{};
  std::mutex mu_;
  bool broken_ = false;  // a submit or wait failed outright; the ring's state is unknown
};

}  // namespace ms::io
