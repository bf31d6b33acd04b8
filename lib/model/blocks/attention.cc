// Grouped-query attention, written once for training forward and backward, pipeline stages and
// cached (serving) passes: the q, k and v projections of the normed input (a column-parallel
// group under tp), rotary embeddings, the attention of the queries against the keys and the
// output projection (row-parallel under tp). What differs between the paths is only where the
// keys and values are: the pass's own (the backend's attention blocks, or around the cp ring
// of parallel/ring_attention.h when each cp rank holds a share of every sequence), or a paged
// cache that the pass appends its own to first (the backend's paged_kv_store and
// paged_attention), with each token's own position for its rotary embedding.
#include <vector>

#include "core/timer.h"
#include "model/model_impl.h"
#include "parallel/cp_layout.h"

namespace ms::model {

ops::AttentionShape Transformer::Impl::attention_shape(const Dims& d) const {
  ops::AttentionShape s;
  s.batch = d.B;
  s.seq = d.T;
  s.heads = tp.heads;
  s.kv_heads = tp.kv_heads;
  s.head_dim = head_dim();
  s.window = cfg.sliding_window;
  return s;
}

void Transformer::Impl::set_documents(const int32_t* inputs, const Dims& d) {
  if (!documents.enabled) return;
  pass.doc.resize(static_cast<size_t>(d.N));
  pass.doc_pos.resize(static_cast<size_t>(d.N));
  if (!cp.active()) {
    document_layout(inputs, d.B, d.T, documents.eod_id, pass.doc.data(), pass.doc_pos.data());
    return;
  }
  // A document may span chunks held by other cp ranks: lay the documents out over the whole
  // sequences, gathered from the group, and keep each rank's tokens' share.
  const int P = cp.size;
  const int64_t T = d.T * P;
  std::vector<int32_t> gathered(static_cast<size_t>(d.N * P)), whole(gathered.size());
  cp.allgather(inputs, gathered.data(), static_cast<size_t>(d.N), DType::kI32);
  for (int r = 0; r < P; ++r) {
    const std::vector<int64_t>& at = cp_layout.index[static_cast<size_t>(r)];
    for (int64_t n = 0; n < d.N; ++n) {
      whole[static_cast<size_t>((n / d.T) * T + at[static_cast<size_t>(n)])] =
          gathered[static_cast<size_t>(r * d.N + n)];
    }
  }
  std::vector<int32_t> doc(whole.size());
  std::vector<int64_t> pos(whole.size());
  document_layout(whole.data(), d.B, T, documents.eod_id, doc.data(), pos.data());
  pass.cp_doc.assign(static_cast<size_t>(P), std::vector<int32_t>(static_cast<size_t>(d.N)));
  for (int r = 0; r < P; ++r) {
    parallel::cp_take(doc.data(), d.B, T, P, r, pass.cp_doc[static_cast<size_t>(r)].data());
  }
  pass.doc = pass.cp_doc[static_cast<size_t>(cp.rank)];
  parallel::cp_take(pos.data(), d.B, T, P, cp.rank, pass.doc_pos.data());
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

ops::AttentionMask Transformer::Impl::attention_mask() const {
  ops::AttentionMask mask;
  if (documents.enabled) {
    mask.q_doc.i32 = pass.doc.data();
    mask.k_doc.i32 = pass.doc.data();
  }
  return mask;
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

void Transformer::Impl::rotate(float* x, int64_t heads, const Dims& d, bool inverse) const {
  // Per-token positions: in the document, or under cp the token's place in the sequence.
  const int64_t* positions = documents.positions ? pass.doc_pos.data()
                             : cp.active()
                                 ? cp_layout.index[static_cast<size_t>(cp.rank)].data()
                                 : nullptr;
  if (positions != nullptr) {
    if (inverse) {
      be->rope_backward_at(x, rope, positions, d.N, heads);
    } else {
      be->rope_forward_at(x, rope, positions, d.N, heads);
    }
    return;
  }
  if (inverse) {
    be->rope_backward(x, rope, d.B, d.T, heads);
  } else {
    be->rope_forward(x, rope, d.B, d.T, heads);
  }
}

void Transformer::Impl::attention_core(AttnActs& a, const Dims& d, const PagedKeys* paged) {
  const int64_t qd = tp.heads * head_dim();
  float* out = sized(a.attn, d.N * qd);
  if (paged != nullptr) {
    const PagedKeys& c = *paged;
    be->rope_forward_at(a.q.data(), rope, c.positions, d.N, tp.heads);
    be->rope_forward_at(a.k.data(), rope, c.positions, d.N, tp.kv_heads);
    be->paged_kv_store(c.shape, c.slots, a.k.data(), a.v.data(), c.k_cache, c.v_cache);
    if (c.poll != nullptr && *c.poll) (*c.poll)();
    be->paged_attention(c.shape, c.slots, a.q.data(), c.k_cache, c.v_cache, out);
    if (c.poll != nullptr && *c.poll) (*c.poll)();
    return;
  }
  rotate(a.q.data(), tp.heads, d, false);
  rotate(a.k.data(), tp.kv_heads, d, false);
  const double t0 = wall_time_s();
  float* lse = sized(a.lse, d.B * tp.heads * d.T);
  if (cp.active()) {
    parallel::ring_attention_forward(
        cp, *be, attention_shape(d), [this](int source) { return cp_mask(source); },
        a.q.data(), a.k.data(), a.v.data(), out, lse, scratch.ring);
  } else {
    be->attention_block_forward(attention_shape(d), attention_mask(), a.q.data(), a.k.data(),
                                a.v.data(), out, lse);
  }
  attention_s += wall_time_s() - t0;
}

const float* Transformer::Impl::attention_forward(const LayerIndex& li, AttnActs& a,
                                                  const float* normed, const Dims& d,
                                                  std::span<const SameInputLinear> also,
                                                  const PagedKeys* paged) {
  const int64_t qd = tp.heads * head_dim(), kvd = tp.kv_heads * head_dim();
  constexpr size_t kMaxProjections = 5;  // q, k, v and the parallel block's gate and up
  std::array<SameInputLinear, kMaxProjections> projections{{
      {li.q, sized(a.q, d.N * qd), qd},
      {li.k, sized(a.k, d.N * kvd), kvd},
      {li.v, sized(a.v, d.N * kvd), kvd},
  }};
  for (size_t i = 0; i < also.size(); ++i) projections[3 + i] = also[i];
  const float* input =
      project_in(normed, d, scratch.gathered, std::span(projections.data(), 3 + also.size()));
  attention_core(a, d, paged);
  return input;
}

void Transformer::Impl::attention_output(const LayerIndex& li, const AttnActs& a,
                                         const float* addend, float* out, const Dims& d,
                                         std::span<const RowLinear> also) {
  constexpr size_t kMaxProjections = 2;  // o and the parallel block's down
  std::array<RowLinear, kMaxProjections> projections{{{li.o, a.attn.data(), tp.heads * head_dim()}}};
  for (size_t i = 0; i < also.size(); ++i) projections[1 + i] = also[i];
  project_out(std::span(projections.data(), 1 + also.size()), addend, out, d);
}

void Transformer::Impl::attention_backward(AttnActs& at, const LayerIndex& li,
                                           const float* input, const float* dout,
                                           const Dims& d) {
  const int64_t D = cfg.d_model, qd = tp.heads * head_dim(), kvd = tp.kv_heads * head_dim();
  Scratch& s = scratch;
  weight_grad(li.o, at.attn.data(), dout, d.N, qd, D);
  float* dq = zeroed(s.dq, d.N * qd);
  float* dk = zeroed(s.dk, d.N * kvd);
  float* dv = zeroed(s.dv, d.N * kvd);
  const double t0 = wall_time_s();
  if (cp.active()) {
    parallel::ring_attention_backward(
        cp, *be, attention_shape(d), [this](int source) { return cp_mask(source); },
        at.q.data(), at.k.data(), at.v.data(), at.attn.data(), at.lse.data(), s.dattn.data(),
        dq, dk, dv, s.ring);
  } else {
    be->attention_block_backward(attention_shape(d), attention_mask(), at.q.data(),
                                 at.k.data(), at.v.data(), at.attn.data(), at.lse.data(),
                                 s.dattn.data(), dq, dk, dv);
  }
  attention_s += wall_time_s() - t0;
  rotate(dq, tp.heads, d, true);
  rotate(dk, tp.kv_heads, d, true);
  weight_grad(li.q, input, dq, d.N, D, qd);
  weight_grad(li.k, input, dk, d.N, D, kvd);
  weight_grad(li.v, input, dv, d.N, D, kvd);
}

}  // namespace ms::model
