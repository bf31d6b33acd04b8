// The backend seam's table (backend_cases.h): one case per op group of ops/backend.h.
#include "backend_cases.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/philox.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/optimizer.h"
#include "ops/paged_attention.h"
#include "ops/quant.h"
#include "ops/quant_act.h"
#include "ops/quant_gemm.h"
#include "ops/reduce.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"

namespace ms::ops {
namespace {

Floats random(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Floats v(n);
  for (size_t i = 0; i < n; ++i) {
    const float u = uniform(seed, 0, i);
    v[i] = lo + (hi - lo) * u;
  }
  return v;
}

std::vector<int32_t> ids(size_t n, int32_t vocab, uint64_t seed) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = static_cast<int32_t>(uniform(seed, 1, i) * static_cast<float>(vocab)) % vocab;
  }
  return v;
}

// A double as two floats, hi = float(v) and lo = float(v - hi): bitwise equal doubles give
// bitwise equal pairs, and a device compared within a tolerance compares hi closely while lo,
// about 1e-8 of hi, falls under the absolute part.
void append_double(Floats& out, double v) {
  const float hi = static_cast<float>(v);
  out.push_back(hi);
  out.push_back(static_cast<float>(v - static_cast<double>(hi)));
}

// What a matmul-class op reads at `precision`: at bf16 each value through a bf16 and back.
Floats as_read(const Floats& v, MatmulPrecision precision) {
  if (precision == MatmulPrecision::kF32) return v;
  std::vector<bf16> narrow(v.size());
  f32_to_bf16(v.data(), narrow.data(), v.size());
  Floats out(v.size());
  bf16_to_f32(narrow.data(), out.data(), v.size());
  return out;
}

}  // namespace

std::vector<OpCase> backend_cases(MatmulPrecision precision) {
  std::vector<OpCase> out;
  const int64_t n = 5, in = 7, o = 6;
  const Floats x = random(n * in, 1), w = random(o * in, 2), dy = random(n * o, 3);
  // The reference's copies of the matmul-class inputs (a backend gets x, w, dy as they are).
  const Floats xr = as_read(x, precision), wr = as_read(w, precision),
               dyr = as_read(dy, precision);
  out.push_back({"linear_forward", [=](Backend* be) {
                   Floats y(n * o);
                   if (be) be->linear_forward(x.data(), w.data(), y.data(), n, in, o);
                   else linear_forward(xr.data(), wr.data(), y.data(), n, in, o);
                   return y;
                 }});
  out.push_back({"linear_backward", [=](Backend* be) {
                   Floats dx = random(n * in, 4), dw = random(o * in, 5);  // accumulated into
                   if (be) be->linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), n, in, o);
                   else linear_backward(xr.data(), wr.data(), dyr.data(), dx.data(), dw.data(), n, in, o);
                   dx.insert(dx.end(), dw.begin(), dw.end());
                   return dx;
                 }});
  out.push_back({"grouped_linear_backward", [=](Backend* be) {
                   const Floats w2 = random(o * in, 6), w2r = as_read(w2, precision);
                   const float* ws[] = {w.data(), w2.data()};
                   const float* wsr[] = {wr.data(), w2r.data()};
                   Floats dx(n * in, 0.0f), dw0(o * in, 0.0f), dw1(o * in, 0.0f);
                   float* dws[] = {dw0.data(), dw1.data()};
                   const int64_t offsets[] = {0, 2, n};
                   if (be) be->grouped_linear_backward(x.data(), ws, offsets, 2, dy.data(), dx.data(), dws, in, o);
                   else grouped_linear_backward(xr.data(), wsr, offsets, 2, dyr.data(), dx.data(), dws, in, o);
                   dx.insert(dx.end(), dw0.begin(), dw0.end());
                   dx.insert(dx.end(), dw1.begin(), dw1.end());
                   return dx;
                 }});
  const Floats gate = random(40, 7, -3, 3), up = random(40, 8), dout = random(40, 9);
  out.push_back({"swiglu_forward", [=](Backend* be) {
                   Floats y(40);
                   if (be) be->swiglu_forward(gate.data(), up.data(), y.data(), 40);
                   else swiglu_forward(gate.data(), up.data(), y.data(), 40);
                   return y;
                 }});
  out.push_back({"swiglu_backward", [=](Backend* be) {
                   Floats dg(40, 0.5f), du(40, -0.5f);
                   if (be) be->swiglu_backward(gate.data(), up.data(), dout.data(), dg.data(), du.data(), 40);
                   else swiglu_backward(gate.data(), up.data(), dout.data(), dg.data(), du.data(), 40);
                   dg.insert(dg.end(), du.begin(), du.end());
                   return dg;
                 }});
  out.push_back({"softmax_forward_backward", [=](Backend* be) {
                   Floats p(40), dx(40);
                   if (be) {
                     be->softmax_forward(gate.data(), p.data(), 5, 8);
                     be->softmax_backward(p.data(), dout.data(), dx.data(), 5, 8);
                   } else {
                     softmax_forward(gate.data(), p.data(), 5, 8);
                     softmax_backward(p.data(), dout.data(), dx.data(), 5, 8);
                   }
                   p.insert(p.end(), dx.begin(), dx.end());
                   return p;
                 }});
  const Floats nw = random(8, 10, 0.5f, 1.5f);
  out.push_back({"rmsnorm_forward_backward", [=](Backend* be) {
                   Floats y(40), rstd(5), dx(40, 0.25f), dnw(8, 1.0f);
                   if (be) {
                     be->rmsnorm_forward(gate.data(), nw.data(), y.data(), rstd.data(), 5, 8, 1e-5f);
                     be->rmsnorm_backward(gate.data(), nw.data(), rstd.data(), dout.data(), dx.data(), dnw.data(), 5, 8);
                   } else {
                     rmsnorm_forward(gate.data(), nw.data(), y.data(), rstd.data(), 5, 8, 1e-5f);
                     rmsnorm_backward(gate.data(), nw.data(), rstd.data(), dout.data(), dx.data(), dnw.data(), 5, 8);
                   }
                   for (const Floats* f : {&rstd, &dx, &dnw}) y.insert(y.end(), f->begin(), f->end());
                   return y;
                 }});
  const RopeTable rope = make_rope_table(8, 4, 10000.0);
  out.push_back({"rope", [=](Backend* be) {
                   // (b 2, t 4, heads 2, head_dim 4) = 64 values; then positions per token.
                   Floats a = random(64, 11), b = random(64, 12), c = random(64, 13), d = random(64, 14);
                   const int64_t pos[] = {3, 0, 7, 1, 2, 2, 5, 6};
                   if (be) {
                     be->rope_forward(a.data(), rope, 2, 4, 2);
                     be->rope_backward(b.data(), rope, 2, 4, 2);
                     be->rope_forward_at(c.data(), rope, pos, 8, 2);
                     be->rope_backward_at(d.data(), rope, pos, 8, 2);
                   } else {
                     rope_forward(a.data(), rope, 2, 4, 2);
                     rope_backward(b.data(), rope, 2, 4, 2);
                     rope_forward_at(c.data(), rope, pos, 8, 2);
                     rope_backward_at(d.data(), rope, pos, 8, 2);
                   }
                   for (const Floats* f : {&b, &c, &d}) a.insert(a.end(), f->begin(), f->end());
                   return a;
                 }});
  AttentionShape s;
  s.batch = 2;
  s.seq = 6;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 4;
  s.block = 4;
  const size_t qn = 2 * 6 * 4 * 4, kn = 2 * 6 * 2 * 4, ln = 2 * 4 * 6;
  const Floats q = random(qn, 15), k = random(kn, 16), v = random(kn, 17), da = random(qn, 18);
  const Floats qr = as_read(q, precision), kr = as_read(k, precision),
               vr = as_read(v, precision), dar = as_read(da, precision);
  out.push_back({"attention_blocks", [=](Backend* be) {
                   // The reference reads the inputs as a matmul-class op does (rounding is
                   // element-wise, so the key blocks below are rounded too).
                   const Floats& qa = be ? q : qr;
                   const Floats& ka = be ? k : kr;
                   const Floats& va = be ? v : vr;
                   const Floats& daa = be ? da : dar;
                   // Two halves of the keys as blocks, merged, then the backward of each.
                   AttentionShape half = s;
                   half.kv_seq = 3;
                   std::vector<int64_t> qi(12), k0(6), k1(6);
                   for (int64_t i = 0; i < 12; ++i) qi[i] = i % 6;
                   for (int64_t i = 0; i < 6; ++i) {
                     k0[i] = i % 3;
                     k1[i] = 3 + i % 3;
                   }
                   const AttentionMask m0{qi.data(), k0.data(), {}, {}};
                   const AttentionMask m1{qi.data(), k1.data(), {}, {}};
                   Floats k_0(kn / 2), k_1(kn / 2), v_0(kn / 2), v_1(kn / 2);
                   const size_t row = 2 * 4;  // kv_heads * head_dim
                   for (size_t b = 0; b < 2; ++b) {
                     for (size_t t = 0; t < 6; ++t) {
                       Floats& kd = t < 3 ? k_0 : k_1;
                       Floats& vd = t < 3 ? v_0 : v_1;
                       const size_t src = (b * 6 + t) * row, dst = (b * 3 + t % 3) * row;
                       std::copy_n(ka.begin() + src, row, kd.begin() + dst);
                       std::copy_n(va.begin() + src, row, vd.begin() + dst);
                     }
                   }
                   Floats o(qn), lse(ln), o1(qn), lse1(ln), dq(qn, 0.0f), dk0(kn / 2, 0.0f),
                       dv0(kn / 2, 0.0f), dk1(kn / 2, 0.0f), dv1(kn / 2, 0.0f);
                   if (be) {
                     be->attention_block_forward(half, m0, q.data(), k_0.data(), v_0.data(), o.data(), lse.data());
                     be->attention_block_forward(half, m1, q.data(), k_1.data(), v_1.data(), o1.data(), lse1.data());
                     be->attention_merge(half, o1.data(), lse1.data(), o.data(), lse.data());
                     be->attention_block_backward(half, m0, q.data(), k_0.data(), v_0.data(), o.data(), lse.data(), da.data(), dq.data(), dk0.data(), dv0.data());
                     be->attention_block_backward(half, m1, q.data(), k_1.data(), v_1.data(), o.data(), lse.data(), da.data(), dq.data(), dk1.data(), dv1.data());
                   } else {
                     attention_block_forward(half, m0, qa.data(), k_0.data(), v_0.data(), o.data(), lse.data());
                     attention_block_forward(half, m1, qa.data(), k_1.data(), v_1.data(), o1.data(), lse1.data());
                     attention_merge(half, o1.data(), lse1.data(), o.data(), lse.data());
                     attention_block_backward(half, m0, qa.data(), k_0.data(), v_0.data(), o.data(), lse.data(), daa.data(), dq.data(), dk0.data(), dv0.data());
                     attention_block_backward(half, m1, qa.data(), k_1.data(), v_1.data(), o.data(), lse.data(), daa.data(), dq.data(), dk1.data(), dv1.data());
                   }
                   for (const Floats* f : {&lse, &dq, &dk0, &dv0, &dk1, &dv1}) o.insert(o.end(), f->begin(), f->end());
                   return o;
                 }});
  out.push_back({"paged_attention", [=](Backend* be) {
                   // Two sequences in a cache of 6 blocks of 2 positions, with scrambled block
                   // tables, one query starting its document at position 2, a window of 4.
                   PagedAttentionShape ps;
                   ps.tokens = 7;
                   ps.heads = 4;
                   ps.kv_heads = 2;
                   ps.head_dim = 4;
                   ps.block_size = 2;
                   ps.window = 4;
                   const int32_t seq_a[] = {4, 1, 5}, seq_b[] = {0, 3};
                   const PagedQuery qs[] = {{0, seq_a, 0}, {1, seq_a, 0}, {2, seq_a, 2},
                                            {3, seq_a, 2}, {4, seq_a, 2}, {0, seq_b, 0},
                                            {1, seq_b, 0}};
                   const Floats pk = random(7 * 8, 29), pv = random(7 * 8, 30);
                   Floats kc(6 * 2 * 2 * 4, 0.0f), vc(kc.size(), 0.0f), po(7 * 16);
                   if (be) {
                     be->paged_kv_store(ps, qs, pk.data(), pv.data(), kc.data(), vc.data());
                     be->paged_attention(ps, qs, q.data(), kc.data(), vc.data(), po.data());
                   } else {
                     paged_kv_store(ps, qs, pk.data(), pv.data(), kc.data(), vc.data());
                     paged_attention(ps, qs, q.data(), kc.data(), vc.data(), po.data());
                   }
                   for (const Floats* f : {&kc, &vc}) po.insert(po.end(), f->begin(), f->end());
                   return po;
                 }});
  const std::vector<int32_t> tok = ids(9, 11, 19);
  const Floats table = random(11 * 4, 20), demb = random(9 * 4, 21);
  out.push_back({"embedding", [=](Backend* be) {
                   Floats e(9 * 4), dt(11 * 4, 0.125f);
                   if (be) {
                     be->embedding_forward(tok.data(), table.data(), e.data(), 9, 4);
                     be->embedding_backward(tok.data(), demb.data(), dt.data(), 9, 4);
                   } else {
                     embedding_forward(tok.data(), table.data(), e.data(), 9, 4);
                     embedding_backward(tok.data(), demb.data(), dt.data(), 9, 4);
                   }
                   e.insert(e.end(), dt.begin(), dt.end());
                   return e;
                 }});
  out.push_back({"softmax_cross_entropy", [=](Backend* be) {
                   Floats logits = random(9 * 11, 22, -4, 4), losses(9);
                   if (be) be->softmax_cross_entropy(logits.data(), tok.data(), losses.data(), 9, 11, 0.5f, true);
                   else softmax_cross_entropy(logits.data(), tok.data(), losses.data(), 9, 11, 0.5f, true);
                   logits.insert(logits.end(), losses.begin(), losses.end());
                   return logits;
                 }});
  out.push_back({"moe", [=](Backend* be) {
                   // 6 tokens, 4 experts, top 2, a capacity of 3, with a routing bias.
                   const int64_t T = 6, E = 4, K = 2, d = 3;
                   Floats probs(T * E);
                   softmax_forward(random(T * E, 23, -2, 2).data(), probs.data(), T, E);
                   const Floats bias = random(E, 24, -0.1f, 0.1f), xs = random(T * d, 25),
                                dyk = random(T * d, 26);
                   Floats weights(T * K);
                   MoeRouting r = be ? be->moe_route(probs.data(), weights.data(), T, E, K, bias.data())
                                     : moe_route(probs.data(), weights.data(), T, E, K, bias.data());
                   if (be) be->moe_apply_capacity(r, 3);
                   else moe_apply_capacity(r, 3);
                   const int64_t rows = r.rows();
                   Floats xp(rows * d), back(T * d, 0.0f), y(T * d), dyp(rows * d, 0.0f),
                       dw(T * K, 0.0f), dprobs(T * E, 0.0f), eb = bias;
                   const Floats yp = random(rows * d, 27);
                   const int64_t counts[] = {5, 1, 3, 3};
                   double aux = 0;
                   if (be) {
                     be->moe_permute_forward(xs.data(), r, xp.data(), d);
                     be->moe_permute_backward(xp.data(), r, back.data(), d);
                     be->moe_unpermute_forward(yp.data(), weights.data(), r, y.data(), d);
                     be->moe_unpermute_backward(yp.data(), weights.data(), r, dyk.data(), dyp.data(), dw.data(), d);
                     be->moe_route_backward(probs.data(), weights.data(), r, dw.data(), dprobs.data());
                     aux = be->moe_aux_loss(probs.data(), r);
                     be->moe_aux_loss_backward(r, 0.3f, dprobs.data());
                     be->moe_update_expert_bias(counts, eb.data(), E, 0.01);
                   } else {
                     moe_permute_forward(xs.data(), r, xp.data(), d);
                     moe_permute_backward(xp.data(), r, back.data(), d);
                     moe_unpermute_forward(yp.data(), weights.data(), r, y.data(), d);
                     moe_unpermute_backward(yp.data(), weights.data(), r, dyk.data(), dyp.data(), dw.data(), d);
                     moe_route_backward(probs.data(), weights.data(), r, dw.data(), dprobs.data());
                     aux = moe_aux_loss(probs.data(), r);
                     moe_aux_loss_backward(r, 0.3f, dprobs.data());
                     moe_update_expert_bias(counts, eb.data(), E, 0.01);
                   }
                   Floats all = weights;
                   for (const int64_t row : r.row_of) all.push_back(static_cast<float>(row));
                   for (const Floats* f : {&xp, &back, &y, &dyp, &dw, &dprobs, &eb}) all.insert(all.end(), f->begin(), f->end());
                   append_double(all, aux);
                   return all;
                 }});
  out.push_back({"add_into", [=](Backend* be) {
                   Floats y = random(40, 28);
                   if (be) be->add_into(y.data(), gate.data(), 40);
                   else add(y.data(), gate.data(), y.data(), 40);
                   return y;
                 }});
  out.push_back({"add", [=](Backend* be) {
                   Floats y = random(40, 37), z = random(40, 38);
                   if (be) {
                     be->add(gate.data(), y.data(), y.data(), 40);
                     be->add(y.data(), up.data(), z.data(), 40);
                   } else {
                     add(gate.data(), y.data(), y.data(), 40);
                     add(y.data(), up.data(), z.data(), 40);
                   }
                   y.insert(y.end(), z.begin(), z.end());
                   return y;
                 }});
  AdamCoefficients ac;
  ac.lr = 1e-2f;
  ac.grad_scale = 0.5f;
  ac.beta1 = 0.9f;
  ac.one_minus_beta1 = 0.1f;
  ac.beta2 = 0.95f;
  ac.one_minus_beta2 = 0.05f;
  ac.inv_bias1 = 1.0f / 0.19f;
  ac.inv_sqrt_bias2 = 1.0f / std::sqrt(0.0975f);
  ac.eps = 1e-8f;
  ac.weight_decay = 0.1f;
  out.push_back({"adamw_update", [=](Backend* be) {
                   // With and without weight decay, from nonzero moments.
                   Floats w = random(40, 31), m = random(40, 32), v = random(40, 33, 0, 1);
                   for (const bool decay : {true, false}) {
                     if (be) be->adamw_update(ac, decay, w.data(), gate.data(), m.data(), v.data(), 40);
                     else adamw_update(ac, decay, w.data(), gate.data(), m.data(), v.data(), 40);
                   }
                   for (const Floats* f : {&m, &v}) w.insert(w.end(), f->begin(), f->end());
                   return w;
                 }});
  out.push_back({"lamb", [=](Backend* be) {
                   Floats w = random(40, 34), m = random(40, 35), v = random(40, 36, 0, 1),
                          d(40), d2(40);
                   double norms[4] = {};
                   if (be) {
                     be->lamb_direction(ac, true, w.data(), gate.data(), m.data(), v.data(), d.data(), norms, 40);
                     be->lamb_direction(ac, false, w.data(), up.data(), m.data(), v.data(), d2.data(), norms + 2, 40);
                     be->lamb_update(0.0125f, d.data(), w.data(), 40);
                   } else {
                     lamb_direction(ac, true, w.data(), gate.data(), m.data(), v.data(), d.data(), norms, 40);
                     lamb_direction(ac, false, w.data(), up.data(), m.data(), v.data(), d2.data(), norms + 2, 40);
                     lamb_update(0.0125f, d.data(), w.data(), 40);
                   }
                   for (const Floats* f : {&m, &v, &d, &d2}) w.insert(w.end(), f->begin(), f->end());
                   for (const double n2 : norms) {
                     append_double(w, n2);
                   }
                   return w;
                 }});
  out.push_back({"fill_copy", [=](Backend* be) {
                   Floats y = random(40, 40), z(40);
                   if (be) {
                     be->fill(y.data() + 3, 20, -2.5f);
                     be->copy(y.data(), z.data(), 40);
                     be->copy(y.data() + 5, y.data() + 2, 30);  // overlapping
                   } else {
                     fill(y.data() + 3, 20, -2.5f);
                     copy(y.data(), z.data(), 40);
                     copy(y.data() + 5, y.data() + 2, 30);
                   }
                   y.insert(y.end(), z.begin(), z.end());
                   return y;
                 }});
  out.push_back({"gather_scatter_rows_add_to_columns", [=](Backend* be) {
                   const int64_t rows[] = {4, 0, 3};
                   Floats g(3 * 8), s = random(5 * 8, 41), c = random(5 * 8, 42);
                   if (be) {
                     be->gather_rows(gate.data(), rows, 3, 8, g.data());
                     be->scatter_rows(g.data(), rows, 3, 8, s.data());
                     be->add_to_columns(c.data(), up.data(), 5, 8);
                   } else {
                     gather_rows(gate.data(), rows, 3, 8, g.data());
                     scatter_rows(g.data(), rows, 3, 8, s.data());
                     add_to_columns(c.data(), up.data(), 5, 8);
                   }
                   for (const Floats* f : {&s, &c}) g.insert(g.end(), f->begin(), f->end());
                   return g;
                 }});
  out.push_back({"embedding_range_forward_backward", [=](Backend* be) {
                   // Rows of ids [2, 6) held: ids outside give zero rows and no gradient.
                   const int32_t tok[] = {3, 0, 5, 7, 2, 3};
                   const Floats table = random(4 * 8, 44), dout = random(6 * 8, 45);
                   Floats out(6 * 8), dtable = random(4 * 8, 46);
                   if (be) {
                     be->embedding_forward_range(tok, table.data(), out.data(), 6, 8, 2, 4);
                     be->embedding_backward_range(tok, dout.data(), dtable.data(), 6, 8, 2, 4);
                   } else {
                     embedding_forward_range(tok, table.data(), out.data(), 6, 8, 2, 4);
                     embedding_backward_range(tok, dout.data(), dtable.data(), 6, 8, 2, 4);
                   }
                   out.insert(out.end(), dtable.begin(), dtable.end());
                   return out;
                 }});
  out.push_back({"vocab_parallel_cross_entropy_pieces", [=](Backend* be) {
                   // 5 rows of 8 columns, 6 real (ids [4, 10)), targets held and not.
                   const int32_t targets[] = {4, 9, 1, 12, 6};
                   Floats logits = random(5 * 8, 47, -3.0f, 3.0f);
                   Floats max(5), pairs(10), lse(5), losses(5);
                   if (be) {
                     be->vocab_row_max(logits.data(), 8, 6, max.data(), 5);
                     be->vocab_local_sums(logits.data(), 8, 6, 4, targets, max.data(),
                                          pairs.data(), 5);
                     be->vocab_losses(max.data(), pairs.data(), lse.data(), losses.data(), 5);
                     be->vocab_local_grad(logits.data(), 8, 6, 4, targets, lse.data(), 0.25f, 5);
                   } else {
                     vocab_row_max(logits.data(), 8, 6, max.data(), 5);
                     vocab_local_sums(logits.data(), 8, 6, 4, targets, max.data(), pairs.data(),
                                      5);
                     vocab_losses(max.data(), pairs.data(), lse.data(), losses.data(), 5);
                     vocab_local_grad(logits.data(), 8, 6, 4, targets, lse.data(), 0.25f, 5);
                   }
                   for (const Floats* f : {&max, &pairs, &lse, &losses}) {
                     logits.insert(logits.end(), f->begin(), f->end());
                   }
                   return logits;
                 }});
  out.push_back({"moe_z_loss_probability_sums", [=](Backend* be) {
                   Floats p(40), lse(5), dl = random(40, 43);
                   double z = 0, sums[8] = {};
                   softmax_forward(gate.data(), p.data(), 5, 8);
                   if (be) {
                     z = be->moe_z_loss(gate.data(), lse.data(), 5, 8);
                     be->moe_z_loss_backward(p.data(), lse.data(), 0.3f, dl.data(), 5, 8);
                     be->moe_probability_sums(p.data(), 5, 8, sums);
                   } else {
                     z = moe_z_loss(gate.data(), lse.data(), 5, 8);
                     moe_z_loss_backward(p.data(), lse.data(), 0.3f, dl.data(), 5, 8);
                     moe_probability_sums(p.data(), 5, 8, sums);
                   }
                   lse.insert(lse.end(), dl.begin(), dl.end());
                   for (const double v : {z, sums[0], sums[3], sums[7]}) {
                     append_double(lse, v);
                   }
                   return lse;
                 }});
  out.push_back({"quantized_linears", [=](Backend* be) {
                   // Two int8 weights reading one x, with f32 and int8 activations.
                   const int64_t rows = 6, cols = 64, tokens = 3;
                   const Floats xq = random(tokens * cols, 44);
                   Floats y;
                   for (const ActivationFormat act : {ActivationFormat::kF32, ActivationFormat::kInt8}) {
                     const QuantizedMatrix w0 = *quantize_weights(random(rows * cols, 45).data(), rows, cols, WeightFormat::kInt8);
                     const QuantizedMatrix w1 = *quantize_weights(random(rows * cols, 46).data(), rows, cols, WeightFormat::kInt8);
                     Floats y0(tokens * rows), y1(tokens * rows);
                     const QuantLinearOut outs[] = {{w0.view(), y0.data()}, {w1.view(), y1.data()}};
                     if (be) be->quantized_linears(xq.data(), outs, tokens, act);
                     else quantized_linears(xq.data(), outs, tokens, act);
                     for (const Floats* f : {&y0, &y1}) y.insert(y.end(), f->begin(), f->end());
                   }
                   return y;
                 }});
  out.push_back({"sum_of_squares_f64", [=](Backend* be) {
                   const double sum = be ? be->sum_of_squares_f64(gate.data(), 40)
                                         : sum_of_squares_f64(gate.data(), 40);
                   Floats out;
                   append_double(out, sum);
                   return out;
                 }});
  return out;
}

}  // namespace ms::ops
