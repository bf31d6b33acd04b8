// Context parallelism's ring attention (parallel/ring_attention.h) at every group size the world
// allows (1, 2, 4): each cp rank holds its two chunks of every sequence (cp_layout.h), and the
// ring's output, log-sum-exp and gradients (dq, dk, dv, with every rank's queries' share of a
// key block) of its rows match the whole-sequence attention of one process within 1e-5, for
// full causal and sliding-window masks, grouped-query heads, one and two sequences.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ops/attention.h"
#include "ops/backend.h"
#include "parallel/cp_layout.h"
#include "parallel/ring_attention.h"
#include "tests/parallel/tp_harness.h"

namespace ms::parallel {
namespace {

class RingAttentionTest : public testing::TpTest {};

// Rows (B, T, width) of the whole sequences -> rank r's (B, T / cp, width), in local order.
std::vector<float> local_rows(const std::vector<float>& all, int64_t B, int64_t T,
                              int64_t width, const std::vector<int64_t>& positions) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b) {
    for (const int64_t t : positions) {
      const auto row = all.begin() + (b * T + t) * width;
      out.insert(out.end(), row, row + width);
    }
  }
  return out;
}

// lse (B, H, T) of the whole sequences -> rank r's (B, H, T / cp).
std::vector<float> local_lse(const std::vector<float>& all, int64_t B, int64_t H, int64_t T,
                             const std::vector<int64_t>& positions) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (const int64_t t : positions) out.push_back(all[static_cast<size_t>((b * H + h) * T + t)]);
    }
  }
  return out;
}

TEST_F(RingAttentionTest, MatchesTheWholeSequenceForwardAndBackward) {
  ops::Backend& be = ops::cpu_backend();
  for (int cp : tp_sizes()) {
    auto comm = tp_group(cp);
    ASSERT_NE(comm, nullptr);
    const int me = comm->rank();
    for (const int64_t B : {1, 2}) {
      for (const int64_t window : {0, 5}) {
        SCOPED_TRACE("cp " + std::to_string(cp) + " batch " + std::to_string(B) + " window " +
                     std::to_string(window));
        const int64_t T = 8 * cp, H = 4, KV = 2, hd = 4, qd = H * hd, kvd = KV * hd;
        ops::AttentionShape whole;
        whole.batch = B;
        whole.seq = T;
        whole.heads = H;
        whole.kv_heads = KV;
        whole.head_dim = hd;
        whole.window = window;
        whole.block = 4;
        const auto values = [&](const char* name, int64_t n) {
          return testing::random_values(static_cast<size_t>(n), 21, name);
        };
        const std::vector<float> q = values("q", B * T * qd), k = values("k", B * T * kvd),
                                 v = values("v", B * T * kvd), dout = values("dout", B * T * qd);
        std::vector<float> out(q.size()), lse(static_cast<size_t>(B * H * T));
        std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
        be.attention_block_forward(whole, {}, q.data(), k.data(), v.data(), out.data(),
                                   lse.data());
        be.attention_block_backward(whole, {}, q.data(), k.data(), v.data(), out.data(),
                                    lse.data(), dout.data(), dq.data(), dk.data(), dv.data());

        // This rank's share: its positions of every sequence, as the model's cp layout has them.
        std::vector<std::vector<int64_t>> index(static_cast<size_t>(cp));
        for (int r = 0; r < cp; ++r) {
          const std::vector<int64_t> at = cp_positions(T, cp, r);
          for (int64_t b = 0; b < B; ++b) index[r].insert(index[r].end(), at.begin(), at.end());
        }
        const std::vector<int64_t> mine = cp_positions(T, cp, me);
        CpRing ring;
        if (cp > 1) {
          ring.comm = comm.get();
          ring.size = cp;
          ring.rank = me;
        }
        ops::AttentionShape local = whole;
        local.seq = T / cp;
        const RingMask mask_of = [&](int source) {
          ops::AttentionMask m;
          m.q_index = index[static_cast<size_t>(me)].data();
          m.k_index = index[static_cast<size_t>(source)].data();
          return m;
        };
        const std::vector<float> lq = local_rows(q, B, T, qd, mine),
                                 lk = local_rows(k, B, T, kvd, mine),
                                 lv = local_rows(v, B, T, kvd, mine),
                                 ldout = local_rows(dout, B, T, qd, mine);
        std::vector<float> lout(lq.size()), llse(static_cast<size_t>(B * H * T / cp));
        RingAttentionBuffers buf;
        ring_attention_forward(ring, be, local, mask_of, lq.data(), lk.data(), lv.data(),
                               lout.data(), llse.data(), buf);
        ASSERT_TRUE(ring.error.ok()) << ring.error.to_string();
        testing::expect_close(lout, local_rows(out, B, T, qd, mine), "out");
        testing::expect_close(llse, local_lse(lse, B, H, T, mine), "lse");

        std::vector<float> ldq(lq.size(), 0.0f), ldk(lk.size(), 0.0f), ldv(lv.size(), 0.0f);
        ring_attention_backward(ring, be, local, mask_of, lq.data(), lk.data(), lv.data(),
                                lout.data(), llse.data(), ldout.data(), ldq.data(), ldk.data(),
                                ldv.data(), buf);
        ASSERT_TRUE(ring.error.ok()) << ring.error.to_string();
        testing::expect_close(ldq, local_rows(dq, B, T, qd, mine), "dq");
        testing::expect_close(ldk, local_rows(dk, B, T, kvd, mine), "dk");
        testing::expect_close(ldv, local_rows(dv, B, T, kvd, mine), "dv");
        if (cp > 1) {
          EXPECT_GT(ring.stats.collectives, 0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace ms::parallel
