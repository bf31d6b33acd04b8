// The chunked, overlapped tensor-parallel collectives (parallel/tp_overlap.h) at every tp the
// world allows and chunk counts 1, 2, 3, 7 and more than the rows: the gathered rows are the
// global activation bitwise; a column-parallel GEMM consuming the gathered chunks, and
// row-parallel GEMMs producing the reduce-scatter's and the all-reduce's partial sums, match
// the unchunked call (chunks = 1) bitwise and ops::linear_forward on the global tensors within
// 1e-5 relative; sums of integer-valued partials (exact in any order) match the direct sum
// bitwise; callbacks that poll (tp_overlap_poll) change nothing; zero rows communicate nothing;
// the statistics and the trace sink count every collective, the blocking all-reduce as fully
// exposed; bad arguments are refused on every rank before communicating.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ops/linear.h"
#include "parallel/tp_overlap.h"
#include "tests/parallel/tp_harness.h"

namespace ms::parallel {
namespace {

using testing::bitwise_equal;
using testing::cols_of;
using testing::expect_close;
using testing::random_values;
using testing::rows_of;

constexpr int kChunkCounts[] = {1, 2, 3, 7, 50};
constexpr int64_t kRowsPerRank[] = {7, 1};

class TpOverlapTest : public testing::TpTest {};

TpOverlap with_chunks(int chunks) {
  TpOverlap overlap;
  overlap.chunks = chunks;
  return overlap;
}

TpSlice slice(int64_t global, const comm::Communicator& tp) {
  return *tp_slice(global, tp.size(), tp.rank(), "test");
}

// Where row i of block r of a (tp m, width) chunk buffer lives in the global activation.
int64_t global_row(int r, int64_t n_local, int64_t row0, int64_t i) {
  return r * n_local + row0 + i;
}

TEST(TpChunkTest, SizesDifferByAtMostOneLargerFirstAndCoverTheRows) {
  EXPECT_EQ(tp_chunk_count(4, 0), 0);
  EXPECT_EQ(tp_chunk_count(0, 5), 1);
  EXPECT_EQ(tp_chunk_count(9, 5), 5);
  for (int64_t rows : {1, 2, 7, 10, 13}) {
    for (int requested : {1, 2, 3, 4, 7, 50}) {
      const int count = tp_chunk_count(requested, rows);
      int64_t next = 0;
      for (int c = 0; c < count; ++c) {
        const TpChunk k = tp_chunk(rows, count, c);
        EXPECT_EQ(k.row0, next);
        EXPECT_GE(k.rows, 1);
        EXPECT_LE(k.rows, tp_chunk(rows, count, 0).rows);
        EXPECT_GE(k.rows, tp_chunk(rows, count, 0).rows - 1);
        next += k.rows;
      }
      EXPECT_EQ(next, rows) << rows << " rows in " << requested << " chunks";
    }
  }
  EXPECT_EQ(tp_chunk(7, 3, 0).rows, 3);
  EXPECT_EQ(tp_chunk(7, 3, 1).row0, 3);
  EXPECT_EQ(tp_chunk(7, 3, 2).rows, 2);
}

// A column-parallel linear under SP: x_local (n_local, in) gathered chunk by chunk, each chunk
// through ops::linear_forward with w (out, in); returns y (n, out) and the gathered x (n, in),
// both assembled from the chunks.
struct GatherRun {
  std::vector<float> x_full, y;
  CommStats stats;
  int calls = 0;
};

GatherRun run_gather(comm::Communicator& tp, int chunks, const std::vector<float>& x_local,
                     int64_t n_local, int64_t in, const std::vector<float>& w, int64_t out) {
  const int64_t n = n_local * tp.size();
  GatherRun run{std::vector<float>(n * in), std::vector<float>(n * out), {}, 0};
  TpOverlap overlap = with_chunks(chunks);
  overlap.stats = &run.stats;
  const Status status = chunked_allgather(
      tp, overlap, x_local.data(), n_local, in,
      [&](const float* gathered, int64_t m, int64_t row0) {
        ++run.calls;
        std::vector<float> y_chunk(tp.size() * m * out);
        ops::linear_forward(gathered, w.data(), y_chunk.data(), tp.size() * m, in, out);
        for (int r = 0; r < tp.size(); ++r) {
          for (int64_t i = 0; i < m; ++i) {
            const int64_t g = global_row(r, n_local, row0, i);
            std::copy_n(gathered + (r * m + i) * in, in, run.x_full.begin() + g * in);
            std::copy_n(y_chunk.begin() + (r * m + i) * out, out, run.y.begin() + g * out);
          }
        }
      });
  EXPECT_TRUE(status.ok()) << status.to_string();
  return run;
}

TEST_F(TpOverlapTest, AllgatherFeedsAColumnParallelGemmLikeTheUnchunkedCall) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    for (int64_t n_local : kRowsPerRank) {
      const int64_t n = n_local * tp_size, in = 9, out = 6;
      const std::vector<float> x = random_values(n * in, 11, "x");
      const std::vector<float> w = random_values(out * in, 11, "w");
      std::vector<float> want(n * out);
      ops::linear_forward(x.data(), w.data(), want.data(), n, in, out);
      const std::vector<float> x_local = rows_of(x, in, slice(n, *tp));
      const GatherRun reference = run_gather(*tp, 1, x_local, n_local, in, w, out);
      for (int chunks : kChunkCounts) {
        const std::string what = "tp " + std::to_string(tp_size) + ", n_local " +
                                 std::to_string(n_local) + ", chunks " + std::to_string(chunks);
        const GatherRun run = run_gather(*tp, chunks, x_local, n_local, in, w, out);
        EXPECT_EQ(run.calls, tp_chunk_count(chunks, n_local)) << what;
        EXPECT_TRUE(bitwise_equal(run.x_full, x)) << what;
        EXPECT_TRUE(bitwise_equal(run.y, reference.y)) << what;
        expect_close(run.y, want, what);
      }
    }
  }
}

// A row-parallel linear's partial products: x_cols (n, in/tp) @ w_cols (out, in/tp)^T for the
// chunk's rows of every block, reduce-scattered; returns y_local (n_local, out).
std::vector<float> run_reduce_scatter(comm::Communicator& tp, int chunks,
                                      const std::vector<float>& x_cols, int64_t n_local,
                                      int64_t in_local, const std::vector<float>& w_cols,
                                      int64_t out, CommStats* stats = nullptr) {
  std::vector<float> y_local(n_local * out, -7.0f);
  TpOverlap overlap = with_chunks(chunks);
  overlap.stats = stats;
  const Status status = chunked_reduce_scatter(
      tp, overlap, n_local, out,
      [&](float* partial, int64_t m, int64_t row0) {
        for (int r = 0; r < tp.size(); ++r) {
          const float* x_rows = x_cols.data() + global_row(r, n_local, row0, 0) * in_local;
          ops::linear_forward(x_rows, w_cols.data(), partial + r * m * out, m, in_local, out);
        }
      },
      y_local.data());
  EXPECT_TRUE(status.ok()) << status.to_string();
  return y_local;
}

TEST_F(TpOverlapTest, ReduceScatterOfRowParallelPartialsMatchesTheUnchunkedCall) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    for (int64_t n_local : kRowsPerRank) {
      const int64_t n = n_local * tp_size, in = 4 * 3, out = 5;
      const std::vector<float> x = random_values(n * in, 12, "x");
      const std::vector<float> w = random_values(out * in, 12, "w");
      std::vector<float> want(n * out);
      ops::linear_forward(x.data(), w.data(), want.data(), n, in, out);
      const TpSlice cols = slice(in, *tp);
      const std::vector<float> x_cols = cols_of(x, n, in, cols);
      const std::vector<float> w_cols = cols_of(w, out, in, cols);
      const std::vector<float> reference =
          run_reduce_scatter(*tp, 1, x_cols, n_local, cols.length, w_cols, out);
      for (int chunks : kChunkCounts) {
        const std::string what = "tp " + std::to_string(tp_size) + ", n_local " +
                                 std::to_string(n_local) + ", chunks " + std::to_string(chunks);
        const std::vector<float> y =
            run_reduce_scatter(*tp, chunks, x_cols, n_local, cols.length, w_cols, out);
        EXPECT_TRUE(bitwise_equal(y, reference)) << what;
        expect_close(y, rows_of(want, out, slice(n, *tp)), what);
      }
    }
  }
}

// Rank r's partial sums (n, width): small integers, whose sum is exact in any order.
std::vector<float> integer_partials(int rank, int64_t n, int64_t width) {
  std::vector<float> p = random_values(n * width, 13, "partial" + std::to_string(rank), 0, 64);
  for (float& v : p) v = static_cast<float>(static_cast<int>(v)) - 32.0f;
  return p;
}

std::vector<float> sum_of_partials(int tp, int64_t n, int64_t width) {
  std::vector<float> sum(n * width, 0.0f);
  for (int r = 0; r < tp; ++r) {
    const std::vector<float> p = integer_partials(r, n, width);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
  }
  return sum;
}

TEST_F(TpOverlapTest, ReduceScatterOfIntegerPartialsIsTheDirectSumBitwise) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    const int64_t n_local = 7, n = n_local * tp_size, width = 3;
    const std::vector<float> mine = integer_partials(tp->rank(), n, width);
    const std::vector<float> want = rows_of(sum_of_partials(tp_size, n, width), width,
                                            slice(n, *tp));
    for (int chunks : kChunkCounts) {
      std::vector<float> y(n_local * width);
      const Status status = chunked_reduce_scatter(
          *tp, with_chunks(chunks), n_local, width,
          [&](float* partial, int64_t m, int64_t row0) {
            for (int r = 0; r < tp_size; ++r) {
              const int64_t g = global_row(r, n_local, row0, 0);
              std::copy_n(mine.begin() + g * width, m * width, partial + r * m * width);
            }
          },
          y.data());
      ASSERT_TRUE(status.ok()) << status.to_string();
      EXPECT_TRUE(bitwise_equal(y, want)) << "tp " << tp_size << ", chunks " << chunks;
    }
  }
}

// A row-parallel linear without SP: each chunk's rows of x_cols @ w_cols^T, all-reduced.
std::vector<float> run_allreduce(comm::Communicator& tp, int chunks,
                                 const std::vector<float>& x_cols, int64_t n, int64_t in_local,
                                 const std::vector<float>& w_cols, int64_t out) {
  std::vector<float> y(n * out, -7.0f);
  const Status status = chunked_allreduce(
      tp, with_chunks(chunks), n, out,
      [&](float* rows, int64_t m, int64_t row0) {
        ops::linear_forward(x_cols.data() + row0 * in_local, w_cols.data(), rows, m, in_local,
                            out);
      },
      y.data());
  EXPECT_TRUE(status.ok()) << status.to_string();
  return y;
}

TEST_F(TpOverlapTest, AllreduceOfRowParallelPartialsMatchesTheUnchunkedCall) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    for (int64_t n : {13, 1}) {
      const int64_t in = 4 * 2, out = 7;
      const std::vector<float> x = random_values(n * in, 14, "x");
      const std::vector<float> w = random_values(out * in, 14, "w");
      std::vector<float> want(n * out);
      ops::linear_forward(x.data(), w.data(), want.data(), n, in, out);
      const TpSlice cols = slice(in, *tp);
      const std::vector<float> x_cols = cols_of(x, n, in, cols);
      const std::vector<float> w_cols = cols_of(w, out, in, cols);
      const std::vector<float> reference = run_allreduce(*tp, 1, x_cols, n, cols.length, w_cols,
                                                         out);
      for (int chunks : kChunkCounts) {
        const std::string what = "tp " + std::to_string(tp_size) + ", n " + std::to_string(n) +
                                 ", chunks " + std::to_string(chunks);
        const std::vector<float> y = run_allreduce(*tp, chunks, x_cols, n, cols.length, w_cols,
                                                   out);
        EXPECT_TRUE(bitwise_equal(y, reference)) << what;
        expect_close(y, want, what);
      }
    }
  }
}

TEST_F(TpOverlapTest, AllreduceOfIntegerPartialsIsTheDirectSumBitwise) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    const int64_t n = 11, width = 4;
    const std::vector<float> mine = integer_partials(tp->rank(), n, width);
    const std::vector<float> want = sum_of_partials(tp_size, n, width);
    for (int chunks : kChunkCounts) {
      std::vector<float> y(n * width);
      const Status status = chunked_allreduce(
          *tp, with_chunks(chunks), n, width,
          [&](float* rows, int64_t m, int64_t row0) {
            std::copy_n(mine.begin() + row0 * width, m * width, rows);
          },
          y.data());
      ASSERT_TRUE(status.ok()) << status.to_string();
      EXPECT_TRUE(bitwise_equal(y, want)) << "tp " << tp_size << ", chunks " << chunks;
    }
  }
}

// Callbacks that poll between rows, as a GEMM split into slices would: the same results as the
// unchunked call, and polling outside a call is a no-op.
TEST_F(TpOverlapTest, PollingInsideTheCallbacksChangesNothing) {
  EXPECT_TRUE(tp_overlap_poll().ok());
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    const int64_t n_local = 7, n = n_local * tp_size, width = 3;
    const std::vector<float> x = random_values(n * width, 15, "x");
    const std::vector<float> x_local = rows_of(x, width, slice(n, *tp));
    const std::vector<float> mine = integer_partials(tp->rank(), n, width);
    const std::vector<float> sum = sum_of_partials(tp_size, n, width);
    for (int chunks : kChunkCounts) {
      const std::string what = "tp " + std::to_string(tp_size) + ", chunks " +
                               std::to_string(chunks);
      CommStats stats;
      TpOverlap overlap = with_chunks(chunks);
      overlap.stats = &stats;
      std::vector<float> gathered(n * width);
      ASSERT_TRUE(chunked_allgather(*tp, overlap, x_local.data(), n_local, width,
                                    [&](const float* chunk, int64_t m, int64_t row0) {
                                      for (int64_t i = 0; i < tp_size * m; ++i) {
                                        EXPECT_TRUE(tp_overlap_poll().ok());
                                        const int64_t g = global_row(i / m, n_local, row0, i % m);
                                        std::copy_n(chunk + i * width, width,
                                                    gathered.begin() + g * width);
                                      }
                                    })
                      .ok());
      EXPECT_TRUE(bitwise_equal(gathered, x)) << what;
      std::vector<float> y_local(n_local * width);
      ASSERT_TRUE(chunked_reduce_scatter(
                      *tp, overlap, n_local, width,
                      [&](float* partial, int64_t m, int64_t row0) {
                        for (int r = 0; r < tp_size; ++r) {
                          EXPECT_TRUE(tp_overlap_poll().ok());
                          std::copy_n(mine.begin() + global_row(r, n_local, row0, 0) * width,
                                      m * width, partial + r * m * width);
                        }
                      },
                      y_local.data())
                      .ok());
      EXPECT_TRUE(bitwise_equal(y_local, rows_of(sum, width, slice(n, *tp)))) << what;
      std::vector<float> y(n * width);
      ASSERT_TRUE(chunked_allreduce(*tp, overlap, n, width,
                                    [&](float* rows, int64_t m, int64_t row0) {
                                      EXPECT_TRUE(tp_overlap_poll().ok());
                                      std::copy_n(mine.begin() + row0 * width, m * width, rows);
                                      EXPECT_TRUE(tp_overlap_poll().ok());
                                    },
                                    y.data())
                      .ok());
      EXPECT_TRUE(bitwise_equal(y, sum)) << what;
      const int64_t count = tp_chunk_count(chunks, n_local);
      EXPECT_EQ(stats.collectives, 2 * count + tp_chunk_count(chunks, n)) << what;
    }
  }
}

TEST_F(TpOverlapTest, ZeroRowsCommunicateNothing) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    CommStats stats;
    int comm_events = 0, callbacks = 0;
    TpOverlap overlap{3, &stats, [&](const char*, uint64_t, double, double) { ++comm_events; }};
    const uint64_t seq = tp->next_seq();
    EXPECT_TRUE(chunked_allgather(*tp, overlap, nullptr, 0, 4,
                                  [&](const float*, int64_t, int64_t) { ++callbacks; })
                    .ok());
    const auto produce = [&](float*, int64_t, int64_t) { ++callbacks; };
    EXPECT_TRUE(chunked_reduce_scatter(*tp, overlap, 0, 4, produce, nullptr).ok());
    EXPECT_TRUE(chunked_allreduce(*tp, overlap, 0, 4, produce, nullptr).ok());
    EXPECT_EQ(callbacks, 0);
    EXPECT_EQ(comm_events, 0);
    EXPECT_EQ(stats.collectives, 0);
    EXPECT_EQ(stats.hidden_fraction(), 0.0);
    EXPECT_EQ(tp->next_seq(), seq);
  }
}

TEST_F(TpOverlapTest, StatsAndTraceSinkCountEveryCollective) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    const int64_t n_local = 7, width = 5, n = n_local * tp_size;
    const uint64_t full = static_cast<uint64_t>(n * width * sizeof(float));
    CommStats stats;
    std::vector<std::string> ops_seen;
    uint64_t traced_bytes = 0;
    TpOverlap overlap{3, &stats, [&](const char* op, uint64_t bytes, double t0, double t1) {
                        ops_seen.push_back(op);
                        traced_bytes += bytes;
                        EXPECT_LE(t0, t1);
                      }};
    const std::vector<float> x(n_local * width, 1.0f);
    std::vector<float> y(n * width);
    const uint64_t seq = tp->next_seq();
    ASSERT_TRUE(chunked_allgather(*tp, overlap, x.data(), n_local, width,
                                  [](const float*, int64_t, int64_t) {})
                    .ok());
    const auto fill = [&](float* rows, int64_t m, int64_t) {
      std::fill_n(rows, tp_size * m * width, 1.0f);
    };
    ASSERT_TRUE(chunked_reduce_scatter(*tp, overlap, n_local, width, fill, y.data()).ok());
    overlap.chunks = 50;  // clamped to the 7 * tp rows
    const auto fill_rows = [&](float* rows, int64_t m, int64_t) {
      std::fill_n(rows, m * width, 1.0f);
    };
    ASSERT_TRUE(chunked_allreduce(*tp, overlap, n, width, fill_rows, y.data()).ok());
    const int64_t allreduces = std::min<int64_t>(50, n);
    EXPECT_EQ(stats.collectives, 3 + 3 + allreduces);
    EXPECT_EQ(tp->next_seq(), seq + stats.collectives);
    EXPECT_EQ(stats.bytes, 3 * full);
    EXPECT_EQ(traced_bytes, stats.bytes);
    ASSERT_EQ(ops_seen.size(), static_cast<size_t>(stats.collectives));
    EXPECT_EQ(std::count(ops_seen.begin(), ops_seen.end(), "allgather"), 3);
    EXPECT_EQ(std::count(ops_seen.begin(), ops_seen.end(), "reduce_scatter"), 3);
    EXPECT_EQ(std::count(ops_seen.begin(), ops_seen.end(), "allreduce"), allreduces);
    EXPECT_GT(stats.active_s, 0.0);
    EXPECT_GE(stats.exposed_s, 0.0);
    EXPECT_GE(stats.hidden_fraction(), 0.0);
    EXPECT_LE(stats.hidden_fraction(), 1.0);
    CommStats twice = stats;
    twice.add(stats);
    EXPECT_EQ(twice.collectives, 2 * stats.collectives);
    EXPECT_EQ(twice.bytes, 2 * stats.bytes);
    EXPECT_DOUBLE_EQ(twice.active_s, 2 * stats.active_s);
    EXPECT_DOUBLE_EQ(twice.exposed_s, 2 * stats.exposed_s);
  }
}

TEST_F(TpOverlapTest, BlockingCollectivesAreCountedAsFullyExposed) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    CommStats stats;
    std::vector<std::string> ops_seen;
    uint64_t traced_bytes = 0;
    TpOverlap overlap{1, &stats, [&](const char* op, uint64_t bytes, double t0, double t1) {
                        ops_seen.push_back(op);
                        traced_bytes += bytes;
                        EXPECT_LE(t0, t1);
                      }};
    // Integer values: the sum is exact in any order, so it is the direct sum bitwise.
    const int64_t count = 11;
    std::vector<float> data(count), expected(count, 0.0f);
    for (int64_t i = 0; i < count; ++i) {
      data[static_cast<size_t>(i)] = static_cast<float>(tp->rank() * 100 + i);
      for (int r = 0; r < tp_size; ++r) {
        expected[static_cast<size_t>(i)] += static_cast<float>(r * 100 + i);
      }
    }
    ASSERT_TRUE(tp_allreduce(*tp, overlap, data.data(), count).ok());
    EXPECT_TRUE(bitwise_equal(data, expected));
    const Status failed = tp_blocking(overlap, "allgather", 5, [] { return Unavailable("x"); });
    EXPECT_EQ(failed.message(), "x");
    EXPECT_EQ(stats.collectives, 2);
    EXPECT_EQ(stats.bytes, count * sizeof(float) + 5);
    EXPECT_EQ(traced_bytes, stats.bytes);
    EXPECT_EQ(ops_seen, (std::vector<std::string>{"allreduce", "allgather"}));
    EXPECT_DOUBLE_EQ(stats.active_s, stats.exposed_s);
  }
}

TEST_F(TpOverlapTest, BadArgumentsAreRefusedBeforeCommunicating) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    const std::vector<float> x(8, 0.0f);
    std::vector<float> y(8 * tp_size);
    const auto consume = [](const float*, int64_t, int64_t) {};
    const auto produce = [](float*, int64_t, int64_t) {};
    const uint64_t seq = tp->next_seq();
    const Status no_chunks = chunked_allgather(*tp, with_chunks(0), x.data(), 2, 4, consume);
    EXPECT_EQ(no_chunks.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(no_chunks.message().find("chunks must be at least 1"), std::string::npos)
        << no_chunks.to_string();
    EXPECT_EQ(chunked_allgather(*tp, TpOverlap{}, x.data(), 2, 0, consume).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(chunked_allgather(*tp, TpOverlap{}, x.data(), -1, 4, consume).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(chunked_allgather(*tp, TpOverlap{}, x.data(), 2, 4, nullptr).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(chunked_reduce_scatter(*tp, TpOverlap{}, 2, 4, produce, nullptr).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(chunked_allreduce(*tp, TpOverlap{}, 2, 4, nullptr, y.data()).code(),
              StatusCode::kInvalidArgument);
    const Status too_big =
        chunked_allreduce(*tp, with_chunks(2), int64_t{1} << 20, int64_t{1} << 12, produce,
                          y.data());
    EXPECT_EQ(too_big.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(too_big.message().find("use more chunks"), std::string::npos)
        << too_big.to_string();
    EXPECT_EQ(tp->next_seq(), seq);
  }
}

}  // namespace
}  // namespace ms::parallel
