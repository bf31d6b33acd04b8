// Context parallelism's ring attention, forward and backward (parallel/ring_attention.h).
#include "parallel/ring_attention.h"

#include <utility>

namespace ms::parallel {
namespace {

constexpr int kKvTag = 7101;    // a key/value block moving to the next rank
constexpr int kGradTag = 7102;  // a dK/dV accumulator moving to the next rank

float* sized(ops::Backend& be, ops::DeviceArray& v, int64_t n) {
  return v.resize(be, static_cast<size_t>(n));
}

// The pieces a ring step's attention is computed in, so that the transfers in flight can be
// polled between them: one per sequence, or for a single sequence its two halves (chunks r and
// 2cp-1-r).
struct QueryPiece {
  int64_t b = 0, t0 = 0, len = 0;
};

std::vector<QueryPiece> query_pieces(int64_t B, int64_t T) {
  std::vector<QueryPiece> pieces;
  if (B > 1 || T < 2) {
    for (int64_t b = 0; b < B; ++b) pieces.push_back({b, 0, T});
  } else {
    pieces.push_back({0, 0, T / 2});
    pieces.push_back({0, T / 2, T - T / 2});
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

void ring_attention_forward(CpRing& ring, ops::Backend& be, const ops::AttentionShape& shape,
                            const RingMask& mask_of, const float* q, const float* k,
                            const float* v, float* out, float* lse, RingAttentionBuffers& buf) {
  const int P = ring.size;
  const int64_t B = shape.batch, T = shape.seq, H = shape.heads;
  const int64_t qd = H * shape.head_dim, kvd = shape.kv_heads * shape.head_dim;
  const int64_t kvn = B * T * kvd;
  float* block_out = sized(be, buf.out, B * T * qd);
  float* block_lse = sized(be, buf.lse, B * H * T);
  const std::vector<QueryPiece> pieces = query_pieces(B, T);
  float* cur = sized(be, buf.kv[0], 2 * kvn);
  float* next = sized(be, buf.kv[1], 2 * kvn);
  be.copy(k, cur, kvn);
  be.copy(v, cur + kvn, kvn);
  for (int s = 0; s < P; ++s) {
    const int source = (ring.rank + P - s) % P;
    RingHop hop;
    if (s + 1 < P) ring.start_hop(hop, cur, next, 2 * kvn, kKvTag);
    const ops::AttentionMask mask = mask_of(source);
    // The first block goes straight into the accumulator, later ones are merged into it.
    float* to_out = s == 0 ? out : block_out;
    float* to_lse = s == 0 ? lse : block_lse;
    for (const QueryPiece& p : pieces) {
      const int64_t row = p.b * T + p.t0;
      float* piece_out = sized(be, buf.piece[0], p.len * qd);
      float* piece_lse = sized(be, buf.piece[1], H * p.len);
      be.attention_block_forward(piece_shape(shape, p, T), piece_mask(mask, p, T),
                                 q + row * qd, cur + p.b * T * kvd, cur + kvn + p.b * T * kvd,
                                 piece_out, piece_lse);
      be.copy(piece_out, to_out + row * qd, p.len * qd);
      for (int64_t h = 0; h < H; ++h) {
        be.copy(piece_lse + h * p.len, to_lse + (p.b * H + h) * T + p.t0, p.len);
      }
      ring.poll(hop);
    }
    if (s > 0) be.attention_merge(shape, block_out, block_lse, out, lse);
    ring.finish_hop(hop);
    std::swap(cur, next);
  }
}

void ring_attention_backward(CpRing& ring, ops::Backend& be, const ops::AttentionShape& shape,
                             const RingMask& mask_of, const float* q, const float* k,
                             const float* v, const float* out, const float* lse,
                             const float* dout, float* dq, float* dk, float* dv,
                             RingAttentionBuffers& buf) {
  const int P = ring.size;
  const int64_t B = shape.batch, T = shape.seq, H = shape.heads;
  const int64_t qd = H * shape.head_dim, kvd = shape.kv_heads * shape.head_dim;
  const int64_t kvn = B * T * kvd;
  const std::vector<QueryPiece> pieces = query_pieces(B, T);
  float* cur = sized(be, buf.kv[0], 2 * kvn);
  float* next = sized(be, buf.kv[1], 2 * kvn);
  float* grad = sized(be, buf.grad[0], 2 * kvn);  // dK | dV of the block held now
  be.fill(grad, 2 * kvn, 0.0f);
  float* grad_next = sized(be, buf.grad[1], 2 * kvn);
  be.copy(k, cur, kvn);
  be.copy(v, cur + kvn, kvn);
  for (int s = 0; s < P; ++s) {
    const int source = (ring.rank + P - s) % P;
    RingHop kv_hop, grad_hop;
    if (s + 1 < P) ring.start_hop(kv_hop, cur, next, 2 * kvn, kKvTag);
    const ops::AttentionMask mask = mask_of(source);
    for (const QueryPiece& p : pieces) {
      const int64_t row = p.b * T + p.t0, kv_row = p.b * T * kvd;
      float* piece_lse = sized(be, buf.piece[1], H * p.len);
      for (int64_t h = 0; h < H; ++h) {
        be.copy(lse + (p.b * H + h) * T + p.t0, piece_lse + h * p.len, p.len);
      }
      be.attention_block_backward(piece_shape(shape, p, T), piece_mask(mask, p, T),
                                  q + row * qd, cur + kv_row, cur + kvn + kv_row, out + row * qd,
                                  piece_lse, dout + row * qd, dq + row * qd, grad + kv_row,
                                  grad + kvn + kv_row);
      ring.poll(kv_hop);
    }
    // The accumulator goes on with its block; the last hop takes it home (a ring of one rank:
    // it is home).
    if (P > 1) ring.start_hop(grad_hop, grad, grad_next, 2 * kvn, kGradTag);
    ring.finish_hop(kv_hop);
    ring.finish_hop(grad_hop);
    std::swap(cur, next);
    if (P > 1) std::swap(grad, grad_next);
  }
  be.add_into(dk, grad, kvn);
  be.add_into(dv, grad + kvn, kvn);
}

}  // namespace ms::parallel
