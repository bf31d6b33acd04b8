// Tensor parallelism's row exchanges with their edge GEMMs (parallel/tp_rows.h) at every group
// size the world allows (1, 2, 4), with and without sequence parallelism and with 1 or 3
// chunks: gather_rows hands back every rank's rows in global order, bitwise, and runs its
// GEMMs on them with the same bits as one GEMM over the whole input; reduce_rows leaves each
// rank the sum over the group of the addend and the GEMMs' partial sums (all rows, or with SP
// its own rows) within 1e-5 of the single-process sum; an input-gradient GEMM accumulates
// into zeroed rows. Without tp both are the bare GEMMs, touching no communicator.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ops/backend.h"
#include "ops/device_array.h"
#include "ops/linear.h"
#include "parallel/tp_rows.h"
#include "tests/parallel/tp_harness.h"

namespace ms::parallel {
namespace {

class TpRowsTest : public testing::TpTest {};

TpGroup group_over(comm::Communicator* comm, bool sp, int chunks) {
  TpGroup g;
  if (comm->size() > 1) {
    g.comm = comm;
    g.size = comm->size();
    g.rank = comm->rank();
    g.sequence_parallel = sp;
  }
  g.overlap.chunks = chunks;
  g.overlap.stats = &g.stats;
  return g;
}

TEST_F(TpRowsTest, GatherRowsDeliversEveryRowAndRunsItsGemms) {
  ops::Backend& be = ops::cpu_backend();
  for (int tp : tp_sizes()) {
    auto comm = tp_group(tp);
    ASSERT_NE(comm, nullptr);
    for (bool sp : {false, true}) {
      for (int chunks : {1, 3}) {
        SCOPED_TRACE("tp " + std::to_string(tp) + (sp ? " sp" : "") + " chunks " +
                     std::to_string(chunks));
        const int64_t N = 12, D = 8, O = 5;
        const std::vector<float> x = testing::random_values(N * D, 3, "x");
        const std::vector<float> w = testing::random_values(O * D, 3, "w");
        TpGroup g = group_over(comm.get(), sp, chunks);
        const bool split = g.sequence_parallel;
        const int64_t nr = split ? N / tp : N;
        const std::vector<float> local =
            split ? testing::rows_of(x, D, {comm->rank() * nr, nr}) : x;
        ops::DeviceArray buf;
        std::vector<float> y(static_cast<size_t>(N * O));
        const float* full = g.gather_rows(be, local.data(), D, N, buf,
                                          {forward_gemm(nullptr, w.data(), D, O, y.data())});
        ASSERT_TRUE(g.error.ok()) << g.error.to_string();
        EXPECT_TRUE(testing::bitwise_equal(std::vector<float>(full, full + N * D), x));
        std::vector<float> want(static_cast<size_t>(N * O));
        ops::linear_forward(x.data(), w.data(), want.data(), N, D, O);
        EXPECT_TRUE(testing::bitwise_equal(y, want));
        EXPECT_EQ(g.stats.collectives > 0, split);
      }
    }
  }
}

TEST_F(TpRowsTest, ReduceRowsSumsTheAddendAndPartialGemmsOverTheGroup) {
  ops::Backend& be = ops::cpu_backend();
  for (int tp : tp_sizes()) {
    auto comm = tp_group(tp);
    ASSERT_NE(comm, nullptr);
    const int me = comm->rank();
    for (bool sp : {false, true}) {
      for (int chunks : {1, 3}) {
        SCOPED_TRACE("tp " + std::to_string(tp) + (sp ? " sp" : "") + " chunks " +
                     std::to_string(chunks));
        const int64_t N = 12, D = 6, I = 7;
        // Rank r's partial input, weight and addend; the sum over r is what every rank wants.
        const auto of = [&](int r, const char* what, int64_t n) {
          return testing::random_values(static_cast<size_t>(n), 10 + r, what);
        };
        std::vector<float> want(static_cast<size_t>(N * D), 0.0f), part(want.size());
        for (int r = 0; r < tp; ++r) {
          ops::linear_forward(of(r, "x", N * I).data(), of(r, "w", D * I).data(), part.data(),
                              N, I, D);
          const std::vector<float> addend = of(r, "a", N * D);
          for (size_t i = 0; i < want.size(); ++i) want[i] += addend[i] + part[i];
        }
        TpGroup g = group_over(comm.get(), sp, chunks);
        const int64_t nr = g.sequence_parallel ? N / tp : N;
        const std::vector<float> x = of(me, "x", N * I), w = of(me, "w", D * I);
        const std::vector<float> addend = of(me, "a", N * D);
        std::vector<float> out(static_cast<size_t>(nr * D));
        g.reduce_rows(be, {forward_gemm(x.data(), w.data(), I, D, nullptr)}, addend.data(),
                      out.data(), D, N, false);
        ASSERT_TRUE(g.error.ok()) << g.error.to_string();
        testing::expect_close(out, testing::rows_of(want, D, {g.sequence_parallel ? me * nr : 0, nr}),
                              "reduced rows");
        // accumulate: the same sum added to what out held.
        std::vector<float> twice = out;
        g.reduce_rows(be, {forward_gemm(x.data(), w.data(), I, D, nullptr)}, addend.data(),
                      twice.data(), D, N, true);
        for (size_t i = 0; i < out.size(); ++i) EXPECT_FLOAT_EQ(twice[i], out[i] + out[i]);
      }
    }
  }
}

TEST_F(TpRowsTest, InputGradientGemmsAccumulateFromZero) {
  ops::Backend& be = ops::cpu_backend();
  auto comm = tp_group(1);
  ASSERT_NE(comm, nullptr);
  TpGroup g = group_over(comm.get(), false, 1);
  const int64_t N = 5, I = 4, O = 3;
  const std::vector<float> dy = testing::random_values(N * O, 5, "dy");
  const std::vector<float> w = testing::random_values(O * I, 5, "w");
  std::vector<float> dx(static_cast<size_t>(N * I), 7.0f);  // overwritten, not added to
  g.reduce_rows(be, {input_grad_gemm(dy.data(), w.data(), I, O, nullptr)}, nullptr, dx.data(),
                I, N, false);
  std::vector<float> want(dx.size(), 0.0f);
  ops::linear_backward(nullptr, w.data(), dy.data(), want.data(), nullptr, N, I, O);
  EXPECT_TRUE(testing::bitwise_equal(dx, want));
}

}  // namespace
}  // namespace ms::parallel
