// Context parallelism's ring attention (model_impl.h, CpState; docs/train.md "Context
// parallelism"). Each cp rank holds T / cp tokens of every sequence, chunks r and 2cp-1-r
// (parallel/cp_layout.h), with its queries, keys and values after RoPE at their global
// positions. The key/value blocks travel around the ring: at step s rank r holds the block of
// rank r - s, computes its queries against it (ops::attention_block_forward, the causal,
// sliding-window and document masks judged from global indices) and folds the result into its
// accumulator (ops::attention_merge), while the block it will need next is already on its way
// (a nonblocking send to r + 1 and receive from r - 1, polled around the compute; the transfers
// are parallel::CpRing's, parallel/cp_ring.h).
//
// The backward runs the matching ring. A key block travels with the accumulator of its dK, dV:
// at step s rank r adds its queries' share of block r - s's gradients to the accumulator it
// received, and passes both on; after cp steps every accumulator is back at its owner. Only
// the accumulators' hop after each step's compute is exposed; the key block's hop overlaps it.
// Every rank of the group runs the same steps in the same order (they are collective over cp).
#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "model/buffers.h"
#include "model/model_impl.h"
#include "ops/attention.h"
#include "parallel/cp_layout.h"
#include "parallel/cp_ring.h"

namespace ms::model {
namespace {

constexpr int kKvTag = 7101;    // a key/value block moving to the next rank
constexpr int kGradTag = 7102;  // a dK/dV accumulator moving to the next rank

// The pieces a ring step's attention is computed in, so that the transfers in flight can be
// polled between them (MPI moves a nonblocking transfer only inside MPI calls): one per
// sequence, or for a single sequence its two halves (chunks r and 2cp-1-r).
struct QueryPiece {
  int64_t b = 0, t0 = 0, len = 0;
};

std::vector<QueryPiece> query_pieces(const Dims& d) {
  std::vector<QueryPiece> pieces;
  if (d.B > 1 || d.T < 2) {
    for (int64_t b = 0; b < d.B; ++b) pieces.push_back({b, 0, d.T});
  } else {
    pieces.push_back({0, 0, d.T / 2});
    pieces.push_back({0, d.T / 2, d.T - d.T / 2});
  }
  return pieces;
}

// `mask` (over all B x T queries and keys) narrowed to piece p's queries and its sequence's keys.
ops::AttentionMask piece_mask(const ops::AttentionMask& mask, const QueryPiece& p, int64_t T) {
  const int64_t q = p.b * T + p.t0, k = p.b * T;
  ops::AttentionMask out = mask;
  out.q_index = mask.q_index + q;
  out.k_index = mask.k_index + k;
  if (mask.q_doc.present()) {
    out.q_doc.i32 = mask.q_doc.i32 == nullptr ? nullptr : mask.q_doc.i32 + q;
    out.q_doc.i64 = mask.q_doc.i64 == nullptr ? nullptr : mask.q_doc.i64 + q;
    out.k_doc.i32 = mask.k_doc.i32 == nullptr ? nullptr : mask.k_doc.i32 + k;
    out.k_doc.i64 = mask.k_doc.i64 == nullptr ? nullptr : mask.k_doc.i64 + k;
  }
  return out;
}

ops::AttentionShape piece_shape(ops::AttentionShape s, const QueryPiece& p, int64_t T) {
  s.batch = 1;
  s.seq = p.len;
  s.kv_seq = T;
  return s;
}

}  // namespace

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
  const int64_t H = tp.heads, qd = H * head_dim(), kvd = tp.kv_heads * head_dim();
  const int64_t kvn = d.N * kvd;
  float* out = sized(a.attn, d.N * qd);
  float* lse = sized(a.lse, d.B * H * d.T);
  float* block_out = sized(scratch.cp_out, d.N * qd);
  float* block_lse = sized(scratch.cp_lse, d.B * H * d.T);
  const std::vector<QueryPiece> pieces = query_pieces(d);
  // [k | v] of the block held now and of the one arriving.
  float* cur = sized(scratch.cp_kv[0], 2 * kvn);
  float* next = sized(scratch.cp_kv[1], 2 * kvn);
  std::memcpy(cur, a.k.data(), static_cast<size_t>(kvn) * sizeof(float));
  std::memcpy(cur + kvn, a.v.data(), static_cast<size_t>(kvn) * sizeof(float));
  for (int s = 0; s < P; ++s) {
    const int source = (cp.rank + P - s) % P;
    parallel::RingHop hop;
    if (s + 1 < P) cp.start_hop(hop, cur, next, 2 * kvn, kKvTag);
    const ops::AttentionMask mask = cp_mask(source);
    // The first block goes straight into the accumulator, later ones are merged into it.
    float* to_out = s == 0 ? out : block_out;
    float* to_lse = s == 0 ? lse : block_lse;
    for (const QueryPiece& p : pieces) {
      const int64_t q = p.b * d.T + p.t0;
      float* piece_out = sized(scratch.cp_piece[0], p.len * qd);
      float* piece_lse = sized(scratch.cp_piece[1], H * p.len);
      be->attention_block_forward(piece_shape(shape, p, d.T), piece_mask(mask, p, d.T),
                                   a.q.data() + q * qd, cur + p.b * d.T * kvd,
                                   cur + kvn + p.b * d.T * kvd, piece_out, piece_lse);
      std::memcpy(to_out + q * qd, piece_out, static_cast<size_t>(p.len * qd) * sizeof(float));
      for (int64_t h = 0; h < H; ++h) {
        std::memcpy(to_lse + (p.b * H + h) * d.T + p.t0, piece_lse + h * p.len,
                    static_cast<size_t>(p.len) * sizeof(float));
      }
      cp.poll(hop);
    }
    if (s > 0) be->attention_merge(shape, block_out, block_lse, out, lse);
    cp.finish_hop(hop);
    std::swap(cur, next);
  }
}

void Transformer::Impl::cp_attention_backward(const AttnActs& a, const float* dout, float* dq,
                                              float* dk, float* dv, const Dims& d) {
  const int P = cp.size;
  const ops::AttentionShape shape = attention_shape(d);
  const int64_t H = tp.heads, qd = H * head_dim(), kvd = tp.kv_heads * head_dim();
  const int64_t kvn = d.N * kvd;
  const std::vector<QueryPiece> pieces = query_pieces(d);
  float* cur = sized(scratch.cp_kv[0], 2 * kvn);
  float* next = sized(scratch.cp_kv[1], 2 * kvn);
  float* grad = zeroed(scratch.cp_grad[0], 2 * kvn);  // dK | dV of the block held now
  float* grad_next = sized(scratch.cp_grad[1], 2 * kvn);
  std::memcpy(cur, a.k.data(), static_cast<size_t>(kvn) * sizeof(float));
  std::memcpy(cur + kvn, a.v.data(), static_cast<size_t>(kvn) * sizeof(float));
  for (int s = 0; s < P; ++s) {
    const int source = (cp.rank + P - s) % P;
    parallel::RingHop kv_hop, grad_hop;
    if (s + 1 < P) cp.start_hop(kv_hop, cur, next, 2 * kvn, kKvTag);
    const ops::AttentionMask mask = cp_mask(source);
    for (const QueryPiece& p : pieces) {
      const int64_t q = p.b * d.T + p.t0, k = p.b * d.T * kvd;
      float* piece_lse = sized(scratch.cp_piece[1], H * p.len);
      for (int64_t h = 0; h < H; ++h) {
        std::memcpy(piece_lse + h * p.len, a.lse.data() + (p.b * H + h) * d.T + p.t0,
                    static_cast<size_t>(p.len) * sizeof(float));
      }
      be->attention_block_backward(piece_shape(shape, p, d.T), piece_mask(mask, p, d.T),
                                    a.q.data() + q * qd, cur + k, cur + kvn + k,
                                    a.attn.data() + q * qd, piece_lse, dout + q * qd,
                                    dq + q * qd, grad + k, grad + kvn + k);
      cp.poll(kv_hop);
    }
    // The accumulator goes on with its block; the last hop takes it home.
    cp.start_hop(grad_hop, grad, grad_next, 2 * kvn, kGradTag);
    cp.finish_hop(kv_hop);
    cp.finish_hop(grad_hop);
    std::swap(cur, next);
    std::swap(grad, grad_next);
  }
  be->add_into(dk, grad, kvn);
  be->add_into(dv, grad + kvn, kvn);
}

}  // namespace ms::model
