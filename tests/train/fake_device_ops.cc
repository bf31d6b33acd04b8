// The guarded fake device's Backend (fake_device.h): each op checks its pointer arguments
// against the seam's contract, then runs lib/ops inside an access window.
#include <string>

#include "fake_device.h"

namespace ms::test {
namespace {

constexpr Device kDevice = Device::cuda(0);

// The seam's contract on each pointer argument. Empty ranges are not checked: nothing reads
// them.
void dev(const char* op, const char* arg, const void* p, int64_t n = 1) {
  if (p == nullptr || n <= 0) return;
  if (!FakeDevice::get().contains(p)) {
    fake_device_abort(std::string(op) + ": " + arg + " (" + fake_device_address(p) +
                      ") is not device memory");
  }
}
void host(const char* op, const char* arg, const void* p, int64_t n = 1) {
  if (p == nullptr || n <= 0) return;
  if (FakeDevice::get().contains(p)) {
    fake_device_abort(std::string(op) + ": " + arg + " (" + fake_device_address(p) +
                      ") is device memory; the seam takes it from the host");
  }
}
void mask_on_host(const char* op, const ops::AttentionMask& m) {
  host(op, "mask.q_index", m.q_index);
  host(op, "mask.k_index", m.k_index);
  host(op, "mask.q_doc",
       m.q_doc.i32 != nullptr ? static_cast<const void*>(m.q_doc.i32) : m.q_doc.i64);
  host(op, "mask.k_doc",
       m.k_doc.i32 != nullptr ? static_cast<const void*>(m.k_doc.i32) : m.k_doc.i64);
}

using Window = FakeDevice::Access;

// Every op: its arguments checked, then lib/ops inside an access window.
class FakeBackend final : public ops::Backend {
 public:
  FakeBackend(DeviceRuntime& runtime, ops::MatmulPrecision precision)
      : runtime_(runtime), precision_(precision) {}
  DeviceRuntime& runtime() override { return runtime_; }
  Stream stream() const override { return Stream{kDevice, nullptr}; }
  ops::MatmulPrecision matmul_precision() const override { return precision_; }

  void linear_forward(const float* x, const float* w, float* y, int64_t n, int64_t in,
                      int64_t out) override {
    dev(__func__, "x", x, n * in);
    dev(__func__, "w", w, out * in);
    dev(__func__, "y", y, n * out);
    Window a;
    cpu().linear_forward(x, w, y, n, in, out);
  }
  void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                       int64_t n, int64_t in, int64_t out) override {
    dev(__func__, "x", x, n * in);
    dev(__func__, "w", w, out * in);
    dev(__func__, "dy", dy, n * out);
    dev(__func__, "dx", dx, n * in);
    dev(__func__, "dw", dw, out * in);
    Window a;
    cpu().linear_backward(x, w, dy, dx, dw, n, in, out);
  }
  void grouped_linear_backward(const float* x, const float* const* w, const int64_t* offsets,
                               int64_t groups, const float* dy, float* dx, float* const* dw,
                               int64_t in, int64_t out) override {
    host(__func__, "offsets", offsets);
    host(__func__, "w (the array)", w);
    host(__func__, "dw (the array)", dw);
    const int64_t rows = offsets[groups];
    for (int64_t g = 0; g < groups; ++g) {
      dev(__func__, "w[g]", w[g]);
      dev(__func__, "dw[g]", dw[g]);
    }
    dev(__func__, "x", x, rows);
    dev(__func__, "dy", dy, rows);
    dev(__func__, "dx", dx, rows);
    Window a;
    cpu().grouped_linear_backward(x, w, offsets, groups, dy, dx, dw, in, out);
  }
  void swiglu_forward(const float* gate, const float* up, float* out, int64_t n) override {
    dev(__func__, "gate", gate, n);
    dev(__func__, "up", up, n);
    dev(__func__, "out", out, n);
    Window a;
    cpu().swiglu_forward(gate, up, out, n);
  }
  void swiglu_backward(const float* gate, const float* up, const float* dout, float* dgate,
                       float* dup, int64_t n) override {
    dev(__func__, "gate", gate, n);
    dev(__func__, "up", up, n);
    dev(__func__, "dout", dout, n);
    dev(__func__, "dgate", dgate, n);
    dev(__func__, "dup", dup, n);
    Window a;
    cpu().swiglu_backward(gate, up, dout, dgate, dup, n);
  }
  void softmax_forward(const float* x, float* p, int64_t n, int64_t e) override {
    dev(__func__, "x", x, n * e);
    dev(__func__, "p", p, n * e);
    Window a;
    cpu().softmax_forward(x, p, n, e);
  }
  void softmax_backward(const float* p, const float* dp, float* dx, int64_t n, int64_t e) override {
    dev(__func__, "p", p, n * e);
    dev(__func__, "dp", dp, n * e);
    dev(__func__, "dx", dx, n * e);
    Window a;
    cpu().softmax_backward(p, dp, dx, n, e);
  }
  void rmsnorm_forward(const float* x, const float* weight, float* out, float* rstd, int64_t n,
                       int64_t d, float eps) override {
    dev(__func__, "x", x, n * d);
    dev(__func__, "weight", weight, d);
    dev(__func__, "out", out, n * d);
    dev(__func__, "rstd", rstd, n);
    Window a;
    cpu().rmsnorm_forward(x, weight, out, rstd, n, d, eps);
  }
  void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dout,
                        float* dx, float* dweight, int64_t n, int64_t d) override {
    dev(__func__, "x", x, n * d);
    dev(__func__, "weight", weight, d);
    dev(__func__, "rstd", rstd, n);
    dev(__func__, "dout", dout, n * d);
    dev(__func__, "dx", dx, n * d);
    dev(__func__, "dweight", dweight, d);
    Window a;
    cpu().rmsnorm_backward(x, weight, rstd, dout, dx, dweight, n, d);
  }
  void rope_forward(float* x, const ops::RopeTable& t, int64_t b, int64_t len,
                    int64_t heads) override {
    dev(__func__, "x", x, b * len * heads);
    Window a;
    cpu().rope_forward(x, t, b, len, heads);
  }
  void rope_backward(float* dx, const ops::RopeTable& t, int64_t b, int64_t len,
                     int64_t heads) override {
    dev(__func__, "dx", dx, b * len * heads);
    Window a;
    cpu().rope_backward(dx, t, b, len, heads);
  }
  void rope_forward_at(float* x, const ops::RopeTable& t, const int64_t* positions, int64_t n,
                       int64_t heads) override {
    dev(__func__, "x", x, n * heads);
    host(__func__, "positions", positions, n);
    Window a;
    cpu().rope_forward_at(x, t, positions, n, heads);
  }
  void rope_backward_at(float* dx, const ops::RopeTable& t, const int64_t* positions, int64_t n,
                        int64_t heads) override {
    dev(__func__, "dx", dx, n * heads);
    host(__func__, "positions", positions, n);
    Window a;
    cpu().rope_backward_at(dx, t, positions, n, heads);
  }

  void attention_block_forward(const ops::AttentionShape& s, const ops::AttentionMask& mask,
                               const float* q, const float* k, const float* v, float* out,
                               float* lse) override {
    mask_on_host(__func__, mask);
    dev(__func__, "q", q);
    dev(__func__, "k", k);
    dev(__func__, "v", v);
    dev(__func__, "out", out);
    dev(__func__, "lse", lse);
    Window a;
    cpu().attention_block_forward(s, mask, q, k, v, out, lse);
  }
  void attention_merge(const ops::AttentionShape& s, const float* out_b, const float* lse_b,
                       float* out, float* lse) override {
    dev(__func__, "out_b", out_b);
    dev(__func__, "lse_b", lse_b);
    dev(__func__, "out", out);
    dev(__func__, "lse", lse);
    Window a;
    cpu().attention_merge(s, out_b, lse_b, out, lse);
  }
  void attention_block_backward(const ops::AttentionShape& s, const ops::AttentionMask& mask,
                                const float* q, const float* k, const float* v, const float* out,
                                const float* lse, const float* dout, float* dq, float* dk,
                                float* dv) override {
    mask_on_host(__func__, mask);
    dev(__func__, "q", q);
    dev(__func__, "k", k);
    dev(__func__, "v", v);
    dev(__func__, "out", out);
    dev(__func__, "lse", lse);
    dev(__func__, "dout", dout);
    dev(__func__, "dq", dq);
    dev(__func__, "dk", dk);
    dev(__func__, "dv", dv);
    Window a;
    cpu().attention_block_backward(s, mask, q, k, v, out, lse, dout, dq, dk, dv);
  }
  void paged_kv_store(const ops::PagedAttentionShape& s, const ops::PagedQuery* queries,
                      const float* k, const float* v, float* k_cache, float* v_cache) override {
    host(__func__, "queries", queries, s.tokens);
    dev(__func__, "k", k);
    dev(__func__, "v", v);
    dev(__func__, "k_cache", k_cache);
    dev(__func__, "v_cache", v_cache);
    Window a;
    cpu().paged_kv_store(s, queries, k, v, k_cache, v_cache);
  }
  void paged_attention(const ops::PagedAttentionShape& s, const ops::PagedQuery* queries,
                       const float* q, const float* k_cache, const float* v_cache,
                       float* out) override {
    host(__func__, "queries", queries, s.tokens);
    dev(__func__, "q", q);
    dev(__func__, "k_cache", k_cache);
    dev(__func__, "v_cache", v_cache);
    dev(__func__, "out", out);
    Window a;
    cpu().paged_attention(s, queries, q, k_cache, v_cache, out);
  }

  void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n,
                         int64_t d) override {
    host(__func__, "ids", ids, n);
    dev(__func__, "table", table);
    dev(__func__, "out", out, n * d);
    Window a;
    cpu().embedding_forward(ids, table, out, n, d);
  }
  void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                          int64_t d) override {
    host(__func__, "ids", ids, n);
    dev(__func__, "dout", dout, n * d);
    dev(__func__, "dtable", dtable);
    Window a;
    cpu().embedding_backward(ids, dout, dtable, n, d);
  }
  void softmax_cross_entropy(float* logits, const int32_t* targets, float* losses, int64_t n,
                             int64_t vocab, float grad_scale, bool write_grad) override {
    dev(__func__, "logits", logits, n * vocab);
    host(__func__, "targets", targets, n);
    dev(__func__, "losses", losses, n);
    Window a;
    cpu().softmax_cross_entropy(logits, targets, losses, n, vocab, grad_scale, write_grad);
  }
  void embedding_forward_range(const int32_t* ids, const float* table, float* out, int64_t n,
                               int64_t d, int64_t first, int64_t count) override {
    host(__func__, "ids", ids, n);
    dev(__func__, "table", table, count * d);
    dev(__func__, "out", out, n * d);
    Window a;
    cpu().embedding_forward_range(ids, table, out, n, d, first, count);
  }
  void embedding_backward_range(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                                int64_t d, int64_t first, int64_t count) override {
    host(__func__, "ids", ids, n);
    dev(__func__, "dout", dout, n * d);
    dev(__func__, "dtable", dtable, count * d);
    Window a;
    cpu().embedding_backward_range(ids, dout, dtable, n, d, first, count);
  }
  void vocab_row_max(const float* logits, int64_t ld, int64_t real, float* max,
                     int64_t n) override {
    dev(__func__, "logits", logits, n * ld);
    dev(__func__, "max", max, n);
    Window a;
    cpu().vocab_row_max(logits, ld, real, max, n);
  }
  void vocab_local_sums(const float* logits, int64_t ld, int64_t real, int64_t first,
                        const int32_t* targets, const float* max, float* pairs,
                        int64_t n) override {
    dev(__func__, "logits", logits, n * ld);
    host(__func__, "targets", targets, n);
    dev(__func__, "max", max, n);
    dev(__func__, "pairs", pairs, n);
    Window a;
    cpu().vocab_local_sums(logits, ld, real, first, targets, max, pairs, n);
  }
  void vocab_losses(const float* max, const float* pairs, float* lse, float* losses,
                    int64_t n) override {
    dev(__func__, "max", max, n);
    dev(__func__, "pairs", pairs, n);
    dev(__func__, "lse", lse, n);
    dev(__func__, "losses", losses, n);
    Window a;
    cpu().vocab_losses(max, pairs, lse, losses, n);
  }
  void vocab_local_grad(float* logits, int64_t ld, int64_t real, int64_t first,
                        const int32_t* targets, const float* lse, float grad_scale,
                        int64_t n) override {
    dev(__func__, "logits", logits, n * ld);
    host(__func__, "targets", targets, n);
    dev(__func__, "lse", lse, n);
    Window a;
    cpu().vocab_local_grad(logits, ld, real, first, targets, lse, grad_scale, n);
  }

  ops::MoeRouting moe_route(const float* probs, float* weights, int64_t n, int64_t e, int64_t k,
                            const float* bias) override {
    dev(__func__, "probs", probs, n * e);
    dev(__func__, "weights", weights, n * k);
    dev(__func__, "bias", bias, e);
    Window a;
    return cpu().moe_route(probs, weights, n, e, k, bias);
  }
  void moe_apply_capacity(ops::MoeRouting& r, int64_t capacity) override {
    cpu().moe_apply_capacity(r, capacity);  // host routing only
  }
  void moe_update_expert_bias(const int64_t* counts, float* bias, int64_t e, double rate) override {
    host(__func__, "counts", counts, e);
    dev(__func__, "bias", bias, e);
    Window a;
    cpu().moe_update_expert_bias(counts, bias, e, rate);
  }
  void moe_route_backward(const float* probs, const float* weights, const ops::MoeRouting& r,
                          const float* dweights, float* dprobs) override {
    dev(__func__, "probs", probs, r.tokens);
    dev(__func__, "weights", weights, r.tokens);
    dev(__func__, "dweights", dweights, r.tokens);
    dev(__func__, "dprobs", dprobs, r.tokens);
    Window a;
    cpu().moe_route_backward(probs, weights, r, dweights, dprobs);
  }
  void moe_permute_forward(const float* x, const ops::MoeRouting& r, float* xp,
                           int64_t d) override {
    dev(__func__, "x", x, r.tokens * d);
    dev(__func__, "xp", xp, r.rows() * d);
    Window a;
    cpu().moe_permute_forward(x, r, xp, d);
  }
  void moe_permute_backward(const float* dxp, const ops::MoeRouting& r, float* dx,
                            int64_t d) override {
    dev(__func__, "dxp", dxp, r.rows() * d);
    dev(__func__, "dx", dx, r.tokens * d);
    Window a;
    cpu().moe_permute_backward(dxp, r, dx, d);
  }
  void moe_unpermute_forward(const float* yp, const float* weights, const ops::MoeRouting& r,
                             float* y, int64_t d) override {
    dev(__func__, "yp", yp, r.rows() * d);
    dev(__func__, "weights", weights, r.tokens);
    dev(__func__, "y", y, r.tokens * d);
    Window a;
    cpu().moe_unpermute_forward(yp, weights, r, y, d);
  }
  void moe_unpermute_backward(const float* yp, const float* weights, const ops::MoeRouting& r,
                              const float* dy, float* dyp, float* dweights, int64_t d) override {
    dev(__func__, "yp", yp, r.rows() * d);
    dev(__func__, "weights", weights, r.tokens);
    dev(__func__, "dy", dy, r.tokens * d);
    dev(__func__, "dyp", dyp, r.rows() * d);
    dev(__func__, "dweights", dweights, r.tokens);
    Window a;
    cpu().moe_unpermute_backward(yp, weights, r, dy, dyp, dweights, d);
  }
  double moe_aux_loss(const float* probs, const ops::MoeRouting& r) override {
    dev(__func__, "probs", probs, r.tokens);
    Window a;
    return cpu().moe_aux_loss(probs, r);
  }
  void moe_aux_loss_backward(const ops::MoeRouting& r, float daux, float* dprobs) override {
    dev(__func__, "dprobs", dprobs, r.tokens);
    Window a;
    cpu().moe_aux_loss_backward(r, daux, dprobs);
  }
  void moe_probability_sums(const float* probs, int64_t n, int64_t e, double* sums) override {
    dev(__func__, "probs", probs, n * e);
    host(__func__, "sums", sums, e);
    Window a;
    cpu().moe_probability_sums(probs, n, e, sums);
  }
  double moe_z_loss(const float* logits, float* lse, int64_t n, int64_t e) override {
    dev(__func__, "logits", logits, n * e);
    dev(__func__, "lse", lse, n);
    Window a;
    return cpu().moe_z_loss(logits, lse, n, e);
  }
  void moe_z_loss_backward(const float* probs, const float* lse, float scale, float* dlogits,
                           int64_t n, int64_t e) override {
    dev(__func__, "probs", probs, n * e);
    dev(__func__, "lse", lse, n);
    dev(__func__, "dlogits", dlogits, n * e);
    Window a;
    cpu().moe_z_loss_backward(probs, lse, scale, dlogits, n, e);
  }

  void quantized_linears(const float* x, std::span<const ops::QuantLinearOut> outs, int64_t n,
                         ops::ActivationFormat activations) override {
    dev(__func__, "x", x, n);
    for (const ops::QuantLinearOut& o : outs) {
      dev(__func__, "w.values", o.w.values);
      dev(__func__, "w.scales", o.w.scales);
      dev(__func__, "y", o.y, n);
    }
    Window a;
    cpu().quantized_linears(x, outs, n, activations);
  }

  void add(const float* a, const float* b, float* out, int64_t n) override {
    dev(__func__, "a", a, n);
    dev(__func__, "b", b, n);
    dev(__func__, "out", out, n);
    Window w;
    cpu().add(a, b, out, n);
  }
  void fill(float* x, int64_t n, float value) override {
    dev(__func__, "x", x, n);
    Window a;
    cpu().fill(x, n, value);
  }
  void copy(const float* src, float* dst, int64_t n) override {
    dev(__func__, "src", src, n);
    dev(__func__, "dst", dst, n);
    Window a;
    cpu().copy(src, dst, n);
  }
  void gather_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                   float* dst) override {
    dev(__func__, "src", src, count * width);
    host(__func__, "rows", rows, count);
    dev(__func__, "dst", dst, count * width);
    Window a;
    cpu().gather_rows(src, rows, count, width, dst);
  }
  void scatter_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                    float* dst) override {
    dev(__func__, "src", src, count * width);
    host(__func__, "rows", rows, count);
    dev(__func__, "dst", dst, count * width);
    Window a;
    cpu().scatter_rows(src, rows, count, width, dst);
  }
  void add_to_columns(float* x, const float* column, int64_t rows, int64_t cols) override {
    dev(__func__, "x", x, rows * cols);
    host(__func__, "column", column, cols);
    Window a;
    cpu().add_to_columns(x, column, rows, cols);
  }

  void adamw_update(const ops::AdamCoefficients& c, bool weight_decay, float* w, const float* g,
                    float* m, float* v, int64_t n) override {
    dev(__func__, "w", w, n);
    dev(__func__, "g", g, n);
    dev(__func__, "m", m, n);
    dev(__func__, "v", v, n);
    Window a;
    cpu().adamw_update(c, weight_decay, w, g, m, v, n);
  }
  void lamb_direction(const ops::AdamCoefficients& c, bool weight_decay, const float* w,
                      const float* g, float* m, float* v, float* d, double* norms,
                      int64_t n) override {
    dev(__func__, "w", w, n);
    dev(__func__, "g", g, n);
    dev(__func__, "m", m, n);
    dev(__func__, "v", v, n);
    dev(__func__, "d", d, n);
    host(__func__, "norms", norms);
    Window a;
    cpu().lamb_direction(c, weight_decay, w, g, m, v, d, norms, n);
  }
  void lamb_update(float step, const float* d, float* w, int64_t n) override {
    dev(__func__, "d", d, n);
    dev(__func__, "w", w, n);
    Window a;
    cpu().lamb_update(step, d, w, n);
  }
  double sum_of_squares_f64(const float* x, int64_t n) override {
    dev(__func__, "x", x, n);
    Window a;
    return cpu().sum_of_squares_f64(x, n);
  }

 private:
  DeviceRuntime& runtime_;
  ops::MatmulPrecision precision_;
  // The host's ops at the same precision (its bf16 rounding scratch is host memory).
  ops::Backend& cpu() const { return ops::cpu_backend(precision_); }
};

}  // namespace

std::unique_ptr<ops::Backend> make_fake_backend(DeviceRuntime& runtime,
                                               ops::MatmulPrecision precision) {
  return std::make_unique<FakeBackend>(runtime, precision);
}

}  // namespace ms::test
