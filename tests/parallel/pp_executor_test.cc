// The pipeline executor on real MPI: a toy model of S = pp * vpp virtual stages, stage s
// mapping x to a_s x + b_s elementwise, loss = sum(target * output), run under every schedule
// for pp = the world size (2, 3 or 4 ranks), vpp 1 and 2 and several micro-batch counts. The
// values are small integers, so every sum is exact in fp32 whatever the order: the losses and
// the gradients of every a_s and b_s must equal the single-process chain's exactly, and every
// message must arrive (stats), with one or many receives posted ahead.
#include <gtest/gtest.h>

#include <functional>

#include <map>
#include <memory>
#include <string>

#include "comm/mpi_communicator.h"
#include "parallel/pp_executor.h"

namespace ms::parallel {
namespace {

constexpr int64_t kElems = 3;

float a_of(int s) { return static_cast<float>(1 + s % 3); }
float b_of(int s) { return static_cast<float>(s % 2); }
float input_of(int mb, int64_t i) { return static_cast<float>((mb + i) % 4 - 1); }
float target_of(int mb, int64_t i) { return static_cast<float>((mb * 3 + i) % 3 - 1); }

struct Grads {
  std::map<int, double> da, db;  // by virtual stage
  double loss = 0;
};

// The whole chain on one process.
Grads reference(int stages, int micro_batches) {
  Grads g;
  for (int mb = 0; mb < micro_batches; ++mb) {
    std::vector<std::vector<float>> xs(stages + 1, std::vector<float>(kElems));
    for (int64_t i = 0; i < kElems; ++i) xs[0][i] = input_of(mb, i);
    for (int s = 0; s < stages; ++s) {
      for (int64_t i = 0; i < kElems; ++i) xs[s + 1][i] = a_of(s) * xs[s][i] + b_of(s);
    }
    std::vector<float> grad(kElems);
    for (int64_t i = 0; i < kElems; ++i) {
      g.loss += target_of(mb, i) * xs[stages][i];
      grad[i] = target_of(mb, i);
    }
    for (int s = stages - 1; s >= 0; --s) {
      for (int64_t i = 0; i < kElems; ++i) {
        g.da[s] += grad[i] * xs[s][i];
        g.db[s] += grad[i];
        grad[i] *= a_of(s);
      }
    }
  }
  return g;
}

// This rank's stages of the chain, driven by the executor.
struct ToyStages {
  int pp = 1, rank = 0, stages = 1;
  std::map<std::pair<int, int>, std::vector<float>> saved_input, saved_grad;
  Grads g;

  PpCallbacks callbacks() {
    PpCallbacks cb;
    cb.forward = [this](int mb, int chunk, std::span<const float> in, std::vector<float>& out) {
      const int s = chunk * pp + rank;
      std::vector<float> x(kElems);
      for (int64_t i = 0; i < kElems; ++i) x[i] = s == 0 ? input_of(mb, i) : in[i];
      saved_input[{mb, chunk}] = x;
      out.resize(kElems);
      for (int64_t i = 0; i < kElems; ++i) out[i] = a_of(s) * x[i] + b_of(s);
      if (s == stages - 1) {
        for (int64_t i = 0; i < kElems; ++i) g.loss += target_of(mb, i) * out[i];
      }
      return Status::OK();
    };
    const auto input_grad = [this](int mb, int chunk, std::span<const float> gout,
                                   std::vector<float>& gin) {
      const int s = chunk * pp + rank;
      std::vector<float> grad(kElems);
      for (int64_t i = 0; i < kElems; ++i) grad[i] = s == stages - 1 ? target_of(mb, i) : gout[i];
      saved_grad[{mb, chunk}] = grad;
      gin.resize(kElems);
      for (int64_t i = 0; i < kElems; ++i) gin[i] = grad[i] * a_of(s);
    };
    const auto weight_grad = [this](int mb, int chunk) {
      const int s = chunk * pp + rank;
      const std::vector<float>& x = saved_input.at({mb, chunk});
      const std::vector<float>& grad = saved_grad.at({mb, chunk});
      for (int64_t i = 0; i < kElems; ++i) {
        g.da[s] += grad[i] * x[i];
        g.db[s] += grad[i];
      }
    };
    cb.backward = [this, input_grad, weight_grad](int mb, int chunk, std::span<const float> gout,
                                                  std::vector<float>& gin) {
      input_grad(mb, chunk, gout, gin);
      if (!zero_bubble) weight_grad(mb, chunk);
      return Status::OK();
    };
    cb.backward_weight = [weight_grad](int mb, int chunk) {
      weight_grad(mb, chunk);
      return Status::OK();
    };
    return cb;
  }
  bool zero_bubble = false;
};

TEST(PpExecutor, EverySchedulesGradientsEqualTheSingleProcessChain) {
  auto world = comm::MpiCommunicator::world();
  ASSERT_TRUE(world.ok());
  comm::Communicator& pp = **world;
  const int P = pp.size();
  int runs = 0;
  for (PpScheduleKind kind :
       {PpScheduleKind::k1F1B, PpScheduleKind::kInterleaved, PpScheduleKind::kZeroBubble}) {
    for (int vpp : {1, 2}) {
      for (int m : {P, 2 * P, 2 * P + 1}) {
        for (int window : {1, 8}) {
          const PpScheduleShape shape{P, vpp, m, kind};
          if (!check_pp_schedule(shape).ok()) continue;
          auto actions = pp_schedule(shape, pp.rank());
          ASSERT_TRUE(actions.ok());
          ToyStages toy;
          toy.pp = P;
          toy.rank = pp.rank();
          toy.stages = P * vpp;
          toy.zero_bubble = kind == PpScheduleKind::kZeroBubble;
          PpP2pStats stats;
          // The trace hook sees every send and receive; progress is callable while it runs.
          int64_t traced_sends = 0, traced_recvs = 0;
          std::function<void()> progress;
          PpExecutorOptions options{kElems, window, &stats, {}, &progress};
          options.on_p2p = [&](const char* op, int, uint64_t bytes, double t0, double t1) {
            EXPECT_EQ(bytes, kElems * sizeof(float));
            EXPECT_LE(t0, t1);
            (std::string(op) == "send" ? traced_sends : traced_recvs) += 1;
            if (progress) progress();
          };
          const Status st = run_pp_schedule(pp, shape, *actions, toy.callbacks(), options);
          EXPECT_FALSE(progress) << "the progress hook outlived the run";
          EXPECT_EQ(traced_sends, stats.messages_sent);
          EXPECT_EQ(traced_recvs, stats.messages_sent);
          ASSERT_TRUE(st.ok()) << pp_schedule_name(kind) << " vpp " << vpp << " m " << m << ": "
                               << st.to_string();
          const Grads want = reference(P * vpp, m);
          for (int c = 0; c < vpp; ++c) {
            const int s = c * P + pp.rank();
            EXPECT_EQ(toy.g.da[s], want.da.at(s)) << "stage " << s;
            EXPECT_EQ(toy.g.db[s], want.db.at(s)) << "stage " << s;
          }
          double loss = toy.g.loss, total = 0;
          std::vector<float> all(static_cast<size_t>(P));
          const float mine = static_cast<float>(loss);
          ASSERT_TRUE(pp.allgather(&mine, all.data(), 1, DType::kF32).ok());
          for (float v : all) total += v;
          EXPECT_EQ(total, want.loss);
          // Each (micro-batch, chunk) sends an activation unless last and a gradient unless first.
          int64_t want_sent = 0;
          for (int c = 0; c < vpp; ++c) {
            const int s = c * P + pp.rank();
            want_sent += (s + 1 < P * vpp ? m : 0) + (s > 0 ? m : 0);
          }
          EXPECT_EQ(stats.messages_sent, want_sent);
          ++runs;
        }
      }
    }
  }
  EXPECT_GE(runs, 12);
}

TEST(PpExecutor, RefusesAGroupOfTheWrongSize) {
  auto world = comm::MpiCommunicator::world();
  ASSERT_TRUE(world.ok());
  const PpScheduleShape shape{(*world)->size() + 1, 1, 4, PpScheduleKind::k1F1B};
  const Status st = run_pp_schedule(**world, shape, {}, {}, {kElems, 2, nullptr, {}, nullptr});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("pipeline group"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ms::parallel
