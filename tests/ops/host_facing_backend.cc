#include "host_facing_backend.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/quant.h"

namespace ms::ops {
namespace {

void ok(const Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.message());
}

// The device copies of one op's host buffers. The same host pointer maps to the same device
// buffer, so in-place calls (out == a) stay in place on the device.
class Mirror {
 public:
  explicit Mirror(Backend& dev) : dev_(dev) {}

  template <typename T>
  const T* in(const T* host, int64_t n) {
    return static_cast<const T*>(map(host, static_cast<size_t>(n) * sizeof(T), false));
  }
  template <typename T>
  T* io(T* host, int64_t n) {
    return static_cast<T*>(map(host, static_cast<size_t>(n) * sizeof(T), true));
  }
  // Copies the written buffers back (finished when it returns).
  void finish() {
    for (Entry& e : entries_) {
      if (!e.written) continue;
      Tensor host = Tensor::view_of(DType::kU8, {static_cast<int64_t>(e.bytes)},
                                    const_cast<void*>(e.host));
      Tensor device = Tensor::view_of(DType::kU8, {static_cast<int64_t>(e.bytes)},
                                      e.device.data(), dev_.device());
      ok(dev_.runtime().copy(host, device, dev_.stream()), "download");
    }
    ok(dev_.runtime().synchronize(dev_.stream()), "synchronize");
  }

 private:
  struct Entry {
    const void* host;
    size_t bytes;
    bool written;
    Buffer device;
  };
  Backend& dev_;
  std::vector<Entry> entries_;

  void* map(const void* host, size_t bytes, bool written) {
    if (host == nullptr || bytes == 0) return nullptr;
    for (Entry& e : entries_) {
      if (e.host == host) {
        if (bytes > e.bytes) throw std::runtime_error("a buffer mirrored twice with two sizes");
        e.written = e.written || written;
        return e.device.data();
      }
    }
    Result<Buffer> device = dev_.runtime().allocator().allocate(bytes, dev_.stream());
    ok(device.status(), "allocate");
    Tensor from = Tensor::view_of(DType::kU8, {static_cast<int64_t>(bytes)},
                                  const_cast<void*>(host));
    Tensor to = Tensor::view_of(DType::kU8, {static_cast<int64_t>(bytes)}, device->data(),
                                dev_.device());
    ok(dev_.runtime().copy(to, from, dev_.stream()), "upload");
    entries_.push_back({host, bytes, written, std::move(*device)});
    return entries_.back().device.data();
  }
};

int64_t rows_of(const int32_t* ids, int64_t n) {
  int64_t rows = 0;
  for (int64_t i = 0; i < n; ++i) rows = std::max<int64_t>(rows, ids[i] + 1);
  return rows;
}

int64_t rows_of(const int64_t* rows, int64_t n) {
  int64_t most = 0;
  for (int64_t i = 0; i < n; ++i) most = std::max(most, rows[i] + 1);
  return most;
}

class HostFacing final : public Backend {
 public:
  explicit HostFacing(Backend& dev) : d_(dev) {}
  DeviceRuntime& runtime() override { return d_.runtime(); }
  Stream stream() const override { return d_.stream(); }
  MatmulPrecision matmul_precision() const override { return d_.matmul_precision(); }

  void linear_forward(const float* x, const float* w, float* y, int64_t n, int64_t in,
                      int64_t out) override {
    Mirror m(d_);
    d_.linear_forward(m.in(x, n * in), m.in(w, out * in), m.io(y, n * out), n, in, out);
    m.finish();
  }
  void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                       int64_t n, int64_t in, int64_t out) override {
    Mirror m(d_);
    d_.linear_backward(m.in(x, n * in), m.in(w, out * in), m.in(dy, n * out), m.io(dx, n * in),
                       m.io(dw, out * in), n, in, out);
    m.finish();
  }
  void grouped_linear_backward(const float* x, const float* const* w, const int64_t* offsets,
                               int64_t groups, const float* dy, float* dx, float* const* dw,
                               int64_t in, int64_t out) override {
    Mirror m(d_);
    const int64_t rows = offsets[groups];
    std::vector<const float*> wd(static_cast<size_t>(groups));
    std::vector<float*> dwd(static_cast<size_t>(groups));
    for (int64_t g = 0; g < groups; ++g) {
      wd[static_cast<size_t>(g)] = m.in(w[g], out * in);
      dwd[static_cast<size_t>(g)] = m.io(dw[g], out * in);
    }
    d_.grouped_linear_backward(m.in(x, rows * in), wd.data(), offsets, groups,
                               m.in(dy, rows * out), m.io(dx, rows * in), dwd.data(), in, out);
    m.finish();
  }
  void swiglu_forward(const float* gate, const float* up, float* out, int64_t n) override {
    Mirror m(d_);
    d_.swiglu_forward(m.in(gate, n), m.in(up, n), m.io(out, n), n);
    m.finish();
  }
  void swiglu_backward(const float* gate, const float* up, const float* dout, float* dgate,
                       float* dup, int64_t n) override {
    Mirror m(d_);
    d_.swiglu_backward(m.in(gate, n), m.in(up, n), m.in(dout, n), m.io(dgate, n), m.io(dup, n),
                       n);
    m.finish();
  }
  void softmax_forward(const float* x, float* p, int64_t n, int64_t e) override {
    Mirror m(d_);
    d_.softmax_forward(m.in(x, n * e), m.io(p, n * e), n, e);
    m.finish();
  }
  void softmax_backward(const float* p, const float* dp, float* dx, int64_t n,
                        int64_t e) override {
    Mirror m(d_);
    d_.softmax_backward(m.in(p, n * e), m.in(dp, n * e), m.io(dx, n * e), n, e);
    m.finish();
  }
  void rmsnorm_forward(const float* x, const float* weight, float* out, float* rstd, int64_t n,
                       int64_t d, float eps) override {
    Mirror m(d_);
    d_.rmsnorm_forward(m.in(x, n * d), m.in(weight, d), m.io(out, n * d), m.io(rstd, n), n, d,
                       eps);
    m.finish();
  }
  void rmsnorm_backward(const float* x, const float* weight, const float* rstd,
                        const float* dout, float* dx, float* dweight, int64_t n,
                        int64_t d) override {
    Mirror m(d_);
    d_.rmsnorm_backward(m.in(x, n * d), m.in(weight, d), m.in(rstd, n), m.in(dout, n * d),
                        m.io(dx, n * d), m.io(dweight, d), n, d);
    m.finish();
  }
  void rope_forward(float* x, const RopeTable& t, int64_t b, int64_t len, int64_t heads) override {
    Mirror m(d_);
    d_.rope_forward(m.io(x, b * len * heads * 2 * t.half), t, b, len, heads);
    m.finish();
  }
  void rope_backward(float* dx, const RopeTable& t, int64_t b, int64_t len,
                     int64_t heads) override {
    Mirror m(d_);
    d_.rope_backward(m.io(dx, b * len * heads * 2 * t.half), t, b, len, heads);
    m.finish();
  }
  void rope_forward_at(float* x, const RopeTable& t, const int64_t* positions, int64_t n,
                       int64_t heads) override {
    Mirror m(d_);
    d_.rope_forward_at(m.io(x, n * heads * 2 * t.half), t, positions, n, heads);
    m.finish();
  }
  void rope_backward_at(float* dx, const RopeTable& t, const int64_t* positions, int64_t n,
                        int64_t heads) override {
    Mirror m(d_);
    d_.rope_backward_at(m.io(dx, n * heads * 2 * t.half), t, positions, n, heads);
    m.finish();
  }

  void attention_block_forward(const AttentionShape& s, const AttentionMask& mask, const float* q,
                               const float* k, const float* v, float* out, float* lse) override {
    Mirror m(d_);
    const Sizes z = sizes(s);
    d_.attention_block_forward(s, mask, m.in(q, z.q), m.in(k, z.k), m.in(v, z.k), m.io(out, z.q),
                               m.io(lse, z.lse));
    m.finish();
  }
  void attention_merge(const AttentionShape& s, const float* out_b, const float* lse_b,
                       float* out, float* lse) override {
    Mirror m(d_);
    const Sizes z = sizes(s);
    d_.attention_merge(s, m.in(out_b, z.q), m.in(lse_b, z.lse), m.io(out, z.q), m.io(lse, z.lse));
    m.finish();
  }
  void attention_block_backward(const AttentionShape& s, const AttentionMask& mask,
                                const float* q, const float* k, const float* v, const float* out,
                                const float* lse, const float* dout, float* dq, float* dk,
                                float* dv) override {
    Mirror m(d_);
    const Sizes z = sizes(s);
    d_.attention_block_backward(s, mask, m.in(q, z.q), m.in(k, z.k), m.in(v, z.k),
                                m.in(out, z.q), m.in(lse, z.lse), m.in(dout, z.q),
                                m.io(dq, z.q), m.io(dk, z.k), m.io(dv, z.k));
    m.finish();
  }
  void paged_kv_store(const PagedAttentionShape& s, const PagedQuery* queries, const float* k,
                      const float* v, float* k_cache, float* v_cache) override {
    Mirror m(d_);
    const int64_t kv = s.tokens * s.kv_heads * s.head_dim, cache = cache_floats(s, queries);
    d_.paged_kv_store(s, queries, m.in(k, kv), m.in(v, kv), m.io(k_cache, cache),
                      m.io(v_cache, cache));
    m.finish();
  }
  void paged_attention(const PagedAttentionShape& s, const PagedQuery* queries, const float* q,
                       const float* k_cache, const float* v_cache, float* out) override {
    Mirror m(d_);
    const int64_t qn = s.tokens * s.heads * s.head_dim, cache = cache_floats(s, queries);
    d_.paged_attention(s, queries, m.in(q, qn), m.in(k_cache, cache), m.in(v_cache, cache),
                       m.io(out, qn));
    m.finish();
  }

  void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n,
                         int64_t d) override {
    Mirror m(d_);
    d_.embedding_forward(ids, m.in(table, rows_of(ids, n) * d), m.io(out, n * d), n, d);
    m.finish();
  }
  void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                          int64_t d) override {
    Mirror m(d_);
    d_.embedding_backward(ids, m.in(dout, n * d), m.io(dtable, rows_of(ids, n) * d), n, d);
    m.finish();
  }
  void softmax_cross_entropy(float* logits, const int32_t* targets, float* losses, int64_t n,
                             int64_t vocab, float grad_scale, bool write_grad) override {
    Mirror m(d_);
    d_.softmax_cross_entropy(m.io(logits, n * vocab), targets, m.io(losses, n), n, vocab,
                             grad_scale, write_grad);
    m.finish();
  }
  void embedding_forward_range(const int32_t* ids, const float* table, float* out, int64_t n,
                               int64_t d, int64_t first, int64_t count) override {
    Mirror m(d_);
    d_.embedding_forward_range(ids, m.in(table, count * d), m.io(out, n * d), n, d, first, count);
    m.finish();
  }
  void embedding_backward_range(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                                int64_t d, int64_t first, int64_t count) override {
    Mirror m(d_);
    d_.embedding_backward_range(ids, m.in(dout, n * d), m.io(dtable, count * d), n, d, first,
                                count);
    m.finish();
  }
  void vocab_row_max(const float* logits, int64_t ld, int64_t real, float* max,
                     int64_t n) override {
    Mirror m(d_);
    d_.vocab_row_max(m.in(logits, n * ld), ld, real, m.io(max, n), n);
    m.finish();
  }
  void vocab_local_sums(const float* logits, int64_t ld, int64_t real, int64_t first,
                        const int32_t* targets, const float* max, float* pairs,
                        int64_t n) override {
    Mirror m(d_);
    d_.vocab_local_sums(m.in(logits, n * ld), ld, real, first, targets, m.in(max, n),
                        m.io(pairs, 2 * n), n);
    m.finish();
  }
  void vocab_losses(const float* max, const float* pairs, float* lse, float* losses,
                    int64_t n) override {
    Mirror m(d_);
    d_.vocab_losses(m.in(max, n), m.in(pairs, 2 * n), m.io(lse, n), m.io(losses, n), n);
    m.finish();
  }
  void vocab_local_grad(float* logits, int64_t ld, int64_t real, int64_t first,
                        const int32_t* targets, const float* lse, float grad_scale,
                        int64_t n) override {
    Mirror m(d_);
    d_.vocab_local_grad(m.io(logits, n * ld), ld, real, first, targets, m.in(lse, n), grad_scale,
                        n);
    m.finish();
  }

  MoeRouting moe_route(const float* probs, float* weights, int64_t n, int64_t e, int64_t k,
                       const float* bias) override {
    Mirror m(d_);
    MoeRouting r = d_.moe_route(m.in(probs, n * e), m.io(weights, n * k), n, e, k, m.in(bias, e));
    m.finish();
    return r;
  }
  void moe_apply_capacity(MoeRouting& r, int64_t capacity) override {
    d_.moe_apply_capacity(r, capacity);
  }
  void moe_update_expert_bias(const int64_t* counts, float* bias, int64_t e,
                              double rate) override {
    Mirror m(d_);
    d_.moe_update_expert_bias(counts, m.io(bias, e), e, rate);
    m.finish();
  }
  void moe_route_backward(const float* probs, const float* weights, const MoeRouting& r,
                          const float* dweights, float* dprobs) override {
    Mirror m(d_);
    const int64_t ne = r.tokens * r.experts, nk = r.tokens * r.top_k;
    d_.moe_route_backward(m.in(probs, ne), m.in(weights, nk), r, m.in(dweights, nk),
                          m.io(dprobs, ne));
    m.finish();
  }
  void moe_permute_forward(const float* x, const MoeRouting& r, float* xp, int64_t d) override {
    Mirror m(d_);
    d_.moe_permute_forward(m.in(x, r.tokens * d), r, m.io(xp, r.rows() * d), d);
    m.finish();
  }
  void moe_permute_backward(const float* dxp, const MoeRouting& r, float* dx,
                            int64_t d) override {
    Mirror m(d_);
    d_.moe_permute_backward(m.in(dxp, r.rows() * d), r, m.io(dx, r.tokens * d), d);
    m.finish();
  }
  void moe_unpermute_forward(const float* yp, const float* weights, const MoeRouting& r,
                             float* y, int64_t d) override {
    Mirror m(d_);
    d_.moe_unpermute_forward(m.in(yp, r.rows() * d), m.in(weights, r.tokens * r.top_k), r,
                             m.io(y, r.tokens * d), d);
    m.finish();
  }
  void moe_unpermute_backward(const float* yp, const float* weights, const MoeRouting& r,
                              const float* dy, float* dyp, float* dweights, int64_t d) override {
    Mirror m(d_);
    const int64_t nk = r.tokens * r.top_k;
    d_.moe_unpermute_backward(m.in(yp, r.rows() * d), m.in(weights, nk), r,
                              m.in(dy, r.tokens * d), m.io(dyp, r.rows() * d),
                              m.io(dweights, nk), d);
    m.finish();
  }
  double moe_aux_loss(const float* probs, const MoeRouting& r) override {
    Mirror m(d_);
    const double aux = d_.moe_aux_loss(m.in(probs, r.tokens * r.experts), r);
    m.finish();
    return aux;
  }
  void moe_aux_loss_backward(const MoeRouting& r, float daux, float* dprobs) override {
    Mirror m(d_);
    d_.moe_aux_loss_backward(r, daux, m.io(dprobs, r.tokens * r.experts));
    m.finish();
  }
  void moe_probability_sums(const float* probs, int64_t n, int64_t e, double* sums) override {
    Mirror m(d_);
    d_.moe_probability_sums(m.in(probs, n * e), n, e, sums);
    m.finish();
  }
  double moe_z_loss(const float* logits, float* lse, int64_t n, int64_t e) override {
    Mirror m(d_);
    const double z = d_.moe_z_loss(m.in(logits, n * e), m.io(lse, n), n, e);
    m.finish();
    return z;
  }
  void moe_z_loss_backward(const float* probs, const float* lse, float scale, float* dlogits,
                           int64_t n, int64_t e) override {
    Mirror m(d_);
    d_.moe_z_loss_backward(m.in(probs, n * e), m.in(lse, n), scale, m.io(dlogits, n * e), n, e);
    m.finish();
  }

  void quantized_linears(const float* x, std::span<const QuantLinearOut> outs, int64_t n,
                         ActivationFormat activations) override {
    Mirror m(d_);
    std::vector<QuantLinearOut> dev(outs.begin(), outs.end());
    int64_t cols = 0;
    for (QuantLinearOut& o : dev) {
      const QuantView w = o.w;
      cols = w.cols;
      o.w.values = m.in(w.values, value_bytes(w.format, w.rows, w.cols));
      o.w.scales = m.in(w.scales, scale_count(w.format, w.rows, w.cols, w.group_size));
      o.y = m.io(o.y, n * w.rows);
    }
    d_.quantized_linears(m.in(x, n * cols), dev, n, activations);
    m.finish();
  }

  void add(const float* a, const float* b, float* out, int64_t n) override {
    Mirror m(d_);
    d_.add(m.in(a, n), m.in(b, n), m.io(out, n), n);
    m.finish();
  }
  void fill(float* x, int64_t n, float value) override {
    Mirror m(d_);
    d_.fill(m.io(x, n), n, value);
    m.finish();
  }
  void copy(const float* src, float* dst, int64_t n) override {
    Mirror m(d_);
    d_.copy(m.in(src, n), m.io(dst, n), n);
    m.finish();
  }
  void gather_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                   float* dst) override {
    Mirror m(d_);
    d_.gather_rows(m.in(src, rows_of(rows, count) * width), rows, count, width,
                   m.io(dst, count * width));
    m.finish();
  }
  void scatter_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                    float* dst) override {
    Mirror m(d_);
    d_.scatter_rows(m.in(src, count * width), rows, count, width,
                    m.io(dst, rows_of(rows, count) * width));
    m.finish();
  }
  void add_to_columns(float* x, const float* column, int64_t rows, int64_t cols) override {
    Mirror m(d_);
    d_.add_to_columns(m.io(x, rows * cols), column, rows, cols);
    m.finish();
  }

  void adamw_update(const AdamCoefficients& c, bool weight_decay, float* w, const float* g,
                    float* mo, float* v, int64_t n) override {
    Mirror m(d_);
    d_.adamw_update(c, weight_decay, m.io(w, n), m.in(g, n), m.io(mo, n), m.io(v, n), n);
    m.finish();
  }
  void lamb_direction(const AdamCoefficients& c, bool weight_decay, const float* w,
                      const float* g, float* mo, float* v, float* d, double* norms,
                      int64_t n) override {
    Mirror m(d_);
    d_.lamb_direction(c, weight_decay, m.in(w, n), m.in(g, n), m.io(mo, n), m.io(v, n),
                      m.io(d, n), norms, n);
    m.finish();
  }
  void lamb_update(float step, const float* d, float* w, int64_t n) override {
    Mirror m(d_);
    d_.lamb_update(step, m.in(d, n), m.io(w, n), n);
    m.finish();
  }
  double sum_of_squares_f64(const float* x, int64_t n) override {
    Mirror m(d_);
    const double sum = d_.sum_of_squares_f64(m.in(x, n), n);
    m.finish();
    return sum;
  }

 private:
  Backend& d_;

  struct Sizes {
    int64_t q, k, lse;
  };
  static Sizes sizes(const AttentionShape& s) {
    const int64_t tk = s.kv_seq != 0 ? s.kv_seq : s.seq;
    return {s.batch * s.seq * s.heads * s.head_dim, s.batch * tk * s.kv_heads * s.head_dim,
            s.batch * s.heads * s.seq};
  }
  // The cache blocks the queries' tables reach, as floats of one layer's cache.
  static int64_t cache_floats(const PagedAttentionShape& s, const PagedQuery* queries) {
    int64_t blocks = 0;
    for (int64_t i = 0; i < s.tokens; ++i) {
      for (int64_t b = 0; b <= queries[i].pos / s.block_size; ++b) {
        blocks = std::max<int64_t>(blocks, queries[i].blocks[b] + 1);
      }
    }
    return blocks * s.kv_heads * s.block_size * s.head_dim;
  }
};

}  // namespace

std::unique_ptr<Backend> host_facing(Backend& device) { return std::make_unique<HostFacing>(device); }

}  // namespace ms::ops
