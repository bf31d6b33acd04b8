// A fixed-size pool of worker threads for CPU work inside one rank (kernels' CPU paths, data
// preparation, checksum and compression of checkpoint shards). Tasks run in submission order.
// parallel_for lets the calling thread work on chunks too, so it completes even when called from
// inside a pool task while every worker is busy.
//
// An idle worker, and a parallel_for waiting for its chunks, spin for up to kSpinMicros before
// they block: a decode step issues a few hundred parallel_for calls of 10-100 us each, and
// waking a blocked thread costs about as much as such a call (docs/infer.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace ms {

class ThreadPool {
 public:
  // Starts `num_threads` workers (at least 1; asserted).
  explicit ThreadPool(size_t num_threads);
  // Stops accepting work, finishes every task already submitted, then joins the workers, so
  // every future handed out becomes ready.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size(); }

  // Queues fn() and returns a future for its result; an exception thrown by fn is stored in
  // the future.
  template <typename Fn>
  auto submit(Fn fn) -> std::future<std::invoke_result_t<Fn&>> {
    using R = std::invoke_result_t<Fn&>;
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(fn));
    std::future<R> future = task->get_future();
    enqueue([task] { (*task)(); });
    return future;
  }

  // Calls fn(chunk_begin, chunk_end) over disjoint chunks covering [begin, end), in parallel on
  // the workers and the calling thread, and returns when all chunks are done. Chunks hold at
  // least `min_chunk` indices; the split depends only on (end - begin, size(), min_chunk). If fn
  // throws, the remaining unclaimed chunks are skipped and the first exception is rethrown here.
  void parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t min_chunk = 1);
  // The same with chunks of exactly `chunk` indices (the last one shorter), claimed one at a
  // time by the calling thread and the workers as each comes free: more chunks than threads
  // balance the work when one thread starts late or runs slow.
  void parallel_chunks(int64_t begin, int64_t end, int64_t chunk,
                       const std::function<void(int64_t, int64_t)>& fn);

  // A sensible default size: the hardware thread count, at least 1.
  static size_t default_size();

  // How long a thread spins for work or for a result before it blocks.
  static constexpr int64_t kSpinMicros = 50;

 private:
  void enqueue(std::function<void()> task);
  void worker_loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), readable without mu_ while spinning
  size_t sleeping_ = 0;            // workers blocked on cv_ (guarded by mu_)
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace ms
