// Context parallelism's ring attention (model_impl.h, CpState; docs/train.md "Context
// parallelism"). Each cp rank holds T / cp tokens of every sequence, chunks r and 2cp-1-r
// (parallel/cp_layout.h), with its queries, keys and values after RoPE at their global
// positions. The key/value blocks travel around the ring: at step s rank r holds the block of
// rank r - s, computes its queries against it (ops::attention_block_forward, the causal,
// sliding-window and document masks judged from global indices) and folds the result into its
// accumulator (ops::attention_merge), while the block it will need next is already on its way
// (a nonblocking send to r + 1 and receive from r - 1, polled around the compute).
//
// The backward runs the matching ring. A key block travels with the accumulator of its dK, dV:
// at step s rank r adds its queries' share of block r - s's gradients to the accumulator it
// received, and passes both on; after cp steps every accumulator is back at its owner. Only
// the accumulators' hop after each step's compute is exposed; the key block's hop overlaps it.
// Every rank of the group runs the same steps in the same order (they are collective over cp).
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/timer.h"
#include "model/buffers.h"
#include "model/model_impl.h"
#include "ops/attention.h"
#include "parallel/cp_layout.h"

namespace ms::model {
namespace {

constexpr int kKvTag = 7101;    // a key/value block moving to the next rank
constexpr int kGradTag = 7102;  // a dK/dV accumulator moving to the next rank

}  // namespace

// The transfers of one ring step: a send to the next rank and a receive from the previous.
struct Transformer::Impl::CpHop {
  comm::Request send, recv;
  double issued = 0;
  bool active = false;
};

void Transformer::Impl::cp_start_hop(CpHop& hop, const float* send, float* recv, int64_t n,
                                     int tag) {
  if (!cp.error.ok()) return;
  const double t0 = wall_time_s();
  const int next = (cp.rank + 1) % cp.size, prev = (cp.rank + cp.size - 1) % cp.size;
  Result<comm::Request> r = cp.comm->irecv(recv, static_cast<size_t>(n), DType::kF32, prev, tag);
  Result<comm::Request> s = r.ok() ? cp.comm->isend(send, static_cast<size_t>(n), DType::kF32,
                                                    next, tag)
                                   : Result<comm::Request>(r.status());
  if (!r.ok() || !s.ok()) {
    cp.error = r.ok() ? s.status() : r.status();
  } else {
    hop.recv = std::move(*r);
    hop.send = std::move(*s);
    hop.issued = t0;
    hop.active = true;
    cp.bytes += static_cast<uint64_t>(n) * sizeof(float);
    ++cp.transfers;
  }
  cp.exposed_s += wall_time_s() - t0;
}

void Transformer::Impl::cp_finish_hop(CpHop& hop) {
  if (!hop.active) return;
  const double t0 = wall_time_s();
  Status st = hop.recv.wait();
  if (st.ok()) st = hop.send.wait();
  const double t1 = wall_time_s();
  hop.active = false;
  cp.active_s += t1 - hop.issued;
  cp.exposed_s += t1 - t0;
  if (!st.ok() && cp.error.ok()) cp.error = st;
}

void Transformer::Impl::set_cp_layout(const Dims& d) {
  if (!cp.active() || (cp_layout.B == d.B && cp_layout.T == d.T)) return;
  cp_layout.B = d.B;
  cp_layout.T = d.T;
  cp_layout.index.assign(static_cast<size_t>(cp.size), {});
  for (int r = 0; r < cp.size; ++r) {
    const std::vector<int64_t> at = parallel::cp_positions(d.T * cp.size, cp.size, r);
    std::vector<int64_t>& index = cp_layout.index[static_cast<size_t>(r)];
    for (int64_t b = 0; b < d.B; ++b) index.insert(index.end(), at.begin(), at.end());
  }
}

ops::AttentionMask Transformer::Impl::cp_mask(int source) const {
  ops::AttentionMask mask;
  mask.q_index = cp_layout.index[static_cast<size_t>(cp.rank)].data();
  mask.k_index = cp_layout.index[static_cast<size_t>(source)].data();
  if (documents.enabled) {
    mask.q_doc.i32 = pass.cp_doc[static_cast<size_t>(cp.rank)].data();
    mask.k_doc.i32 = pass.cp_doc[static_cast<size_t>(source)].data();
  }
  return mask;
}

void Transformer::Impl::cp_attention_forward(AttnActs& a, const Dims& d) {
  const int P = cp.size;
  const ops::AttentionShape shape = attention_shape(d);
  const int64_t qd = tp.heads * head_dim(), kvn = d.N * tp.kv_heads * head_dim();
  float* out = sized(a.attn, d.N * qd);
  float* lse = sized(a.lse, d.B * tp.heads * d.T);
  float* block_out = sized(scratch.cp_out, d.N * qd);
  float* block_lse = sized(scratch.cp_lse, d.B * tp.heads * d.T);
  // [k | v] of the block held now and of the one arriving.
  float* cur = sized(scratch.cp_kv[0], 2 * kvn);
  float* next = sized(scratch.cp_kv[1], 2 * kvn);
  std::memcpy(cur, a.k.data(), static_cast<size_t>(kvn) * sizeof(float));
  std::memcpy(cur + kvn, a.v.data(), static_cast<size_t>(kvn) * sizeof(float));
  for (int s = 0; s < P; ++s) {
    const int source = (cp.rank + P - s) % P;
    CpHop hop;
    if (s + 1 < P) cp_start_hop(hop, cur, next, 2 * kvn, kKvTag);
    const ops::AttentionMask mask = cp_mask(source);
    if (s == 0) {
      ops::attention_block_forward(shape, mask, a.q.data(), cur, cur + kvn, out, lse);
    } else {
      ops::attention_block_forward(shape, mask, a.q.data(), cur, cur + kvn, block_out,
                                   block_lse);
      ops::attention_merge(shape, block_out, block_lse, out, lse);
    }
    cp_finish_hop(hop);
    std::swap(cur, next);
  }
}

void Transformer::Impl::cp_attention_backward(const AttnActs& a, const float* dout, float* dq,
                                              float* dk, float* dv, const Dims& d) {
  const int P = cp.size;
  const ops::AttentionShape shape = attention_shape(d);
  const int64_t kvn = d.N * tp.kv_heads * head_dim();
  float* cur = sized(scratch.cp_kv[0], 2 * kvn);
  float* next = sized(scratch.cp_kv[1], 2 * kvn);
  float* grad = zeroed(scratch.cp_grad[0], 2 * kvn);  // dK | dV of the block held now
  float* grad_next = sized(scratch.cp_grad[1], 2 * kvn);
  std::memcpy(cur, a.k.data(), static_cast<size_t>(kvn) * sizeof(float));
  std::memcpy(cur + kvn, a.v.data(), static_cast<size_t>(kvn) * sizeof(float));
  for (int s = 0; s < P; ++s) {
    const int source = (cp.rank + P - s) % P;
    CpHop kv_hop, grad_hop;
    if (s + 1 < P) cp_start_hop(kv_hop, cur, next, 2 * kvn, kKvTag);
    ops::attention_block_backward(shape, cp_mask(source), a.q.data(), cur, cur + kvn,
                                  a.attn.data(), a.lse.data(), dout, dq, grad, grad + kvn);
    // The accumulator goes on with its block; the last hop takes it home.
    cp_start_hop(grad_hop, grad, grad_next, 2 * kvn, kGradTag);
    cp_finish_hop(kv_hop);
    cp_finish_hop(grad_hop);
    std::swap(cur, next);
    std::swap(grad, grad_next);
  }
  add_into(dk, grad, kvn);
  add_into(dv, grad + kvn, kvn);
}

}  // namespace ms::model
