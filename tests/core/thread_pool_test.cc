// ThreadPool: futures, parallel_for and parallel_chunks coverage and exceptions, nested use, and
// shutdown.
#include "core/thread_pool.h"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ms {
namespace {

TEST(ThreadPool, SubmitReturnsTheResultThroughAFuture) {
  ThreadPool pool(2);
  EXPECT_EQ(pool.size(), 2u);
  std::future<int> f = pool.submit([] { return 6 * 7; });
  EXPECT_EQ(f.get(), 42);
  std::future<void> v = pool.submit([] {});
  v.get();
}

TEST(ThreadPool, ExceptionsTravelThroughTheFuture) {
  ThreadPool pool(1);
  std::future<int> f = pool.submit([]() -> int { throw std::runtime_error("boom"); });
  EXPECT_THROW(f.get(), std::runtime_error);
}

TEST(ThreadPool, ParallelForCoversEveryIndexExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 5, 17, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(0, n, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << n << " " << i;
  }
}

TEST(ThreadPool, ParallelForHonoursOffsetsAndMinimumChunk) {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  std::atomic<int> chunks{0};
  pool.parallel_for(10, 20, [&](int64_t lo, int64_t hi) {
    chunks++;
    for (int64_t i = lo; i < hi; ++i) sum += i;
  }, /*min_chunk=*/5);
  EXPECT_EQ(sum.load(), 145);
  EXPECT_EQ(chunks.load(), 2);
}

// parallel_chunks: exactly `chunk` indices per call (the last shorter), every index once, more
// chunks than threads, and the calling thread alone when the only worker is busy.
TEST(ThreadPool, ParallelChunksCoversEveryIndexInChunksOfTheGivenSize) {
  ThreadPool pool(1);
  for (int64_t chunk : {1, 3, 7, 100}) {
    const int64_t begin = 5, end = 48;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(end));
    std::atomic<int> calls{0}, short_calls{0};
    pool.parallel_chunks(begin, end, chunk, [&](int64_t lo, int64_t hi) {
      calls++;
      EXPECT_EQ((lo - begin) % chunk, 0) << chunk;
      if (hi - lo != chunk) {
        short_calls++;
        EXPECT_EQ(hi, end) << chunk;  // only the last chunk is shorter
      }
      for (int64_t i = lo; i < hi; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (int64_t i = 0; i < end; ++i) {
      EXPECT_EQ(hits[static_cast<size_t>(i)].load(), i < begin ? 0 : 1) << chunk << " " << i;
    }
    EXPECT_EQ(calls.load(), (end - begin + chunk - 1) / chunk) << chunk;
    EXPECT_LE(short_calls.load(), 1);
  }
  std::future<int64_t> nested = pool.submit([&pool] {
    std::atomic<int64_t> sum{0};
    pool.parallel_chunks(0, 100, 9, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) sum += i;
    });
    return sum.load();
  });
  EXPECT_EQ(nested.get(), 4950);
  EXPECT_THROW(pool.parallel_chunks(0, 50, 5, [](int64_t lo, int64_t) {
    if (lo == 20) throw std::invalid_argument("bad chunk");
  }), std::invalid_argument);
}

TEST(ThreadPool, ParallelForRethrowsTheFirstException) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(0, 100, [](int64_t lo, int64_t) {
    if (lo == 0) throw std::invalid_argument("bad chunk");
  }), std::invalid_argument);
  // The pool still works afterwards.
  EXPECT_EQ(pool.submit([] { return 1; }).get(), 1);
}

TEST(ThreadPool, ParallelForInsideAPoolTaskCompletes) {
  ThreadPool pool(1);  // the only worker runs the outer task, so the caller must help
  std::future<int64_t> f = pool.submit([&pool] {
    std::atomic<int64_t> sum{0};
    pool.parallel_for(0, 100, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) sum += i;
    });
    return sum.load();
  });
  EXPECT_EQ(f.get(), 4950);
}

TEST(ThreadPool, DestructionFinishesPendingWork) {
  std::atomic<int> done{0};
  std::vector<std::future<void>> futures;
  {
    ThreadPool pool(2);
    for (int i = 0; i < 200; ++i) futures.push_back(pool.submit([&done] { done++; }));
  }
  EXPECT_EQ(done.load(), 200);
  for (auto& f : futures) f.get();  // every future is ready, none broken
}

// A worker spins for a while after its last task, then blocks: work submitted in either state
// must reach it (a lost wake-up would leave the future unready and fail here, not hang).
TEST(ThreadPool, WorkReachesSpinningAndBlockedWorkers) {
  ThreadPool pool(2);
  for (int i = 0; i < 40; ++i) {
    if (i % 2 == 1) {
      std::this_thread::sleep_for(std::chrono::microseconds(4 * ThreadPool::kSpinMicros));
    }
    std::future<int> f = pool.submit([i] { return i; });
    ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "task " << i;
    EXPECT_EQ(f.get(), i);
    std::atomic<int64_t> sum{0};
    pool.parallel_for(0, 1000, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) sum += k;
    });
    EXPECT_EQ(sum.load(), 999 * 1000 / 2);
  }
}

TEST(ThreadPool, DefaultSizeIsPositive) { EXPECT_GE(ThreadPool::default_size(), 1u); }

}  // namespace
}  // namespace ms
