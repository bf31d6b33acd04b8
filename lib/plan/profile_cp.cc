// The ring attention timed on a cp group; see profile_cp.h.
#include "plan/profile_cp.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/timer.h"
#include "ops/backend.h"
#include "parallel/cp_layout.h"
#include "parallel/ring_attention.h"
#include "plan/profile_timer.h"

namespace ms::plan {
namespace {

// Every rank must make the same calls (each is collective): rank 0 times one and decides.
Result<int> agreed_calls(comm::Communicator& group, const std::function<void()>& call,
                         double min_seconds) {
  Stopwatch watch;
  call();
  const double once = std::max(1e-6, watch.elapsed_s());
  int calls = std::clamp(static_cast<int>(min_seconds / once) + 1, 8, 1000);
  MS_RETURN_IF_ERROR(group.broadcast(&calls, sizeof(calls), DType::kU8, 0));
  return calls;
}

double timed_calls(int calls, const std::function<void()>& call) {
  std::vector<double> times;
  for (int i = 0; i < calls; ++i) {
    Stopwatch watch;
    call();
    times.push_back(watch.elapsed_s());
  }
  return lower_quartile(times);
}

}  // namespace

bool parse_cp_attention_key(const std::string& key, AttentionOp& op, int& cp, bool& backward) {
  const bool bwd = key.rfind("cp_attn_bwd ", 0) == 0;
  if (!bwd && key.rfind("cp_attn_fwd ", 0) != 0) return false;
  long long v[7];
  char tail = 0;
  if (std::sscanf(key.c_str() + 12, "%lldx%lldx%lldx%lldx%lldx%lldx%lld%c", &v[0], &v[1], &v[2],
                  &v[3], &v[4], &v[5], &v[6], &tail) != 7) {
    return false;
  }
  op = {v[0], v[1], v[2], v[3], v[4], v[5]};
  cp = static_cast<int>(v[6]);
  backward = bwd;
  return cp >= 1 && op.seq % (2 * cp) == 0;
}

Result<std::pair<double, double>> cp_attention_times(comm::Communicator& group,
                                                     const AttentionOp& op, double min_seconds) {
  const int cp = group.size(), rank = group.rank();
  if (op.seq % (2 * cp) != 0) {
    return InvalidArgument("cp attention probe: sequence " + std::to_string(op.seq) +
                           " does not cut into 2 x " + std::to_string(cp) + " chunks");
  }
  const int64_t local = op.seq / cp;
  const ops::AttentionShape shape{.batch = op.batch,
                                  .seq = local,
                                  .heads = op.heads,
                                  .kv_heads = op.kv_heads,
                                  .head_dim = op.head_dim,
                                  .window = op.window};
  // Each rank's global positions, batch row after batch row (as the model lays them out).
  std::vector<std::vector<int64_t>> index(static_cast<size_t>(cp));
  for (int r = 0; r < cp; ++r) {
    const std::vector<int64_t> at = parallel::cp_positions(op.seq, cp, r);
    for (int64_t b = 0; b < op.batch; ++b) {
      index[static_cast<size_t>(r)].insert(index[static_cast<size_t>(r)].end(), at.begin(),
                                           at.end());
    }
  }
  const parallel::RingMask mask_of = [&](int source) {
    ops::AttentionMask m;
    m.q_index = index[static_cast<size_t>(rank)].data();
    m.k_index = index[static_cast<size_t>(source)].data();
    return m;
  };
  const size_t q = static_cast<size_t>(op.batch * local * op.heads * op.head_dim);
  const size_t kv = static_cast<size_t>(op.batch * local * op.kv_heads * op.head_dim);
  std::vector<float> Q(q, 0.01f), K(kv, 0.02f), V(kv, 0.03f), O(q),
      lse(static_cast<size_t>(op.batch * op.heads * local)), dO(q, 0.01f), dQ(q), dK(kv), dV(kv);
  parallel::CpRing ring;
  ring.comm = &group;
  ring.size = cp;
  ring.rank = rank;
  parallel::RingAttentionBuffers buffers;
  ops::Backend& be = ops::cpu_backend();
  const auto forward = [&] {
    parallel::ring_attention_forward(ring, be, shape, mask_of, Q.data(), K.data(), V.data(),
                                     O.data(), lse.data(), buffers);
  };
  const auto backward = [&] {
    std::fill(dQ.begin(), dQ.end(), 0.0f);  // the trainer's are zeroed before each backward
    std::fill(dK.begin(), dK.end(), 0.0f);
    std::fill(dV.begin(), dV.end(), 0.0f);
    parallel::ring_attention_backward(ring, be, shape, mask_of, Q.data(), K.data(), V.data(),
                                      O.data(), lse.data(), dO.data(), dQ.data(), dK.data(),
                                      dV.data(), buffers);
  };
  MS_ASSIGN_OR_RETURN(const int fwd_calls, agreed_calls(group, forward, min_seconds));
  double fwd = timed_calls(fwd_calls, forward);
  MS_ASSIGN_OR_RETURN(const int bwd_calls, agreed_calls(group, backward, min_seconds));
  double bwd = timed_calls(bwd_calls, backward);
  MS_RETURN_IF_ERROR(ring.error);
  MS_RETURN_IF_ERROR(group.broadcast(&fwd, sizeof(fwd), DType::kU8, 0));
  MS_RETURN_IF_ERROR(group.broadcast(&bwd, sizeof(bwd), DType::kU8, 0));
  return std::pair{fwd, bwd};
}

}  // namespace ms::plan
