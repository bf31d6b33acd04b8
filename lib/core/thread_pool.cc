#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <exception>

namespace ms {
namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until ready() or ThreadPool::kSpinMicros have passed; returns ready()'s last answer.
template <class Ready>
bool spin_until(Ready ready) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point give_up = Clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (int i = 1;; ++i) {
    if (ready()) return true;
    if (i % 64 == 0 && Clock::now() >= give_up) return false;
    cpu_relax();
  }
}

// Shared by the caller of parallel_for and the helper tasks it submits. Held by shared_ptr
// because a helper may only start after parallel_for has returned; it then finds no chunk left
// and never touches fn.
struct ParallelForState {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t chunk = 1;
  int64_t num_chunks = 0;
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  std::atomic<int64_t> next_chunk{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable done_cv;
  std::atomic<int64_t> chunks_finished{0};
  std::exception_ptr error;

  // Claims and runs chunks until none are left.
  void work() {
    for (int64_t c = next_chunk.fetch_add(1); c < num_chunks; c = next_chunk.fetch_add(1)) {
      run_chunk(c);
      if (chunks_finished.fetch_add(1) + 1 == num_chunks) {
        // Under mu, so a waiter that saw chunks unfinished is blocked by now, not about to be.
        std::lock_guard<std::mutex> lock(mu);
        done_cv.notify_all();
      }
    }
  }

  void run_chunk(int64_t c) {
    if (failed.load()) return;
    const int64_t lo = begin + c * chunk;
    const int64_t hi = std::min(end, lo + chunk);
    try {
      (*fn)(lo, hi);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
      failed = true;
    }
  }

  void wait() {
    const auto all_done = [&] { return chunks_finished.load() == num_chunks; };
    if (spin_until(all_done)) return;
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, all_done);
  }
};

}  // namespace

ThreadPool::ThreadPool(size_t num_threads) {
  assert(num_threads >= 1);
  workers_.reserve(num_threads);
  for (size_t i = 0; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

size_t ThreadPool::default_size() { return std::max(1u, std::thread::hardware_concurrency()); }

void ThreadPool::enqueue(std::function<void()> task) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    assert(!stopping_ && "submit on a ThreadPool that is being destroyed");
    queue_.push_back(std::move(task));
    queued_.store(queue_.size());
    // A spinning worker sees queued_; only a blocked one needs the (slow) wake-up. A worker
    // about to block checks the queue under mu_ first, so it cannot miss this task.
    wake = sleeping_ > 0;
  }
  if (wake) cv_.notify_one();
}

void ThreadPool::worker_loop() {
  for (;;) {
    spin_until([&] { return queued_.load(std::memory_order_relaxed) > 0; });
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleeping_;
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      --sleeping_;
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.store(queue_.size());
    }
    task();
  }
}

void ThreadPool::parallel_for(int64_t begin, int64_t end,
                              const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  assert(min_chunk >= 1);
  if (end <= begin) return;
  const int64_t parts = static_cast<int64_t>(size()) + 1;  // the workers and the caller
  parallel_chunks(begin, end, std::max(min_chunk, (end - begin + parts - 1) / parts), fn);
}

void ThreadPool::parallel_chunks(int64_t begin, int64_t end, int64_t chunk,
                                 const std::function<void(int64_t, int64_t)>& fn) {
  assert(chunk >= 1);
  if (end <= begin) return;
  auto state = std::make_shared<ParallelForState>();
  state->begin = begin;
  state->end = end;
  state->chunk = chunk;
  state->num_chunks = (end - begin + chunk - 1) / chunk;
  state->fn = &fn;
  // One helper per worker at most: each claims chunks until none are left.
  const int64_t helpers = std::min<int64_t>(state->num_chunks - 1, static_cast<int64_t>(size()));
  for (int64_t i = 0; i < helpers; ++i) enqueue([state] { state->work(); });
  state->work();
  state->wait();
  if (state->error) std::rethrow_exception(state->error);
}

}  // namespace ms
