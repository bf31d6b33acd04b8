// One process-wide ThreadPool created on first use, sized from the environment.
#include "ops/parallel.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/thread_pool.h"

namespace ms::ops {
namespace {

int threads_from_environment() {
  for (const char* name : {"MS_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && std::atoi(value) > 0) return std::atoi(value);
  }
  return static_cast<int>(ThreadPool::default_size());
}

// nullptr when one thread: parallel_for then runs inline.
ThreadPool* shared_pool() {
  static const std::unique_ptr<ThreadPool> pool =
      num_threads() > 1 ? std::make_unique<ThreadPool>(num_threads() - 1) : nullptr;
  return pool.get();
}

}  // namespace

int num_threads() {
  static const int threads = threads_from_environment();
  return threads;
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  ThreadPool* pool = shared_pool();
  const int64_t chunk = std::max<int64_t>(min_chunk, (n + 4 * num_threads() - 1) /
                                                         (4 * num_threads()));
  if (pool == nullptr || chunk >= n) {
    fn(0, n);
    return;
  }
  pool->parallel_for(0, n, fn, chunk);
}

void parallel_blocks(int64_t n, int64_t block, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  ThreadPool* pool = shared_pool();
  if (pool == nullptr || block >= n) {
    fn(0, n);
    return;
  }
  pool->parallel_chunks(0, n, block, fn);
}

}  // namespace ms::ops
