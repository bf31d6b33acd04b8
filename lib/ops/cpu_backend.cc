// The CPU backend: lib/ops behind the seam of ops/backend.h, op for op.
#include <vector>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/backend.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/optimizer.h"
#include "ops/paged_attention.h"
#include "ops/reduce.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"

namespace ms::ops {

const char* matmul_precision_name(MatmulPrecision p) {
  return p == MatmulPrecision::kBf16 ? "bf16" : "f32";
}

namespace {

// Input `slot` (0-3) of the matmul-class call in progress, rounded to bf16 into per-thread
// scratch (a rank may issue ops from several threads, never one call's inputs from two). An
// input the call does not read (null) stays null.
const float* rounded_input(int slot, const float* x, int64_t n) {
  if (x == nullptr) return nullptr;
  static thread_local std::vector<float> scratch[4];
  std::vector<float>& buffer = scratch[slot];
  if (buffer.size() < static_cast<size_t>(n)) buffer.resize(static_cast<size_t>(n));
  round_to_bf16(x, buffer.data(), static_cast<size_t>(n));
  return buffer.data();
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(MatmulPrecision precision) : precision_(precision) {}

  DeviceRuntime& runtime() override { return host_runtime(); }
  Stream stream() const override { return Stream{}; }
  MatmulPrecision matmul_precision() const override { return precision_; }

  void linear_forward(const float* x, const float* w, float* y, int64_t n, int64_t in,
                      int64_t out) override {
    if (mixed()) {
      x = rounded_input(0, x, n * in);
      w = rounded_input(1, w, out * in);
    }
    ops::linear_forward(x, w, y, n, in, out);
  }
  void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                       int64_t n, int64_t in, int64_t out) override {
    if (mixed()) {
      x = rounded_input(0, x, n * in);
      w = rounded_input(1, w, out * in);
      dy = rounded_input(2, dy, n * out);
    }
    ops::linear_backward(x, w, dy, dx, dw, n, in, out);
  }
  void grouped_linear_backward(const float* x, const float* const* w, const int64_t* offsets,
                               int64_t groups, const float* dy, float* dx, float* const* dw,
                               int64_t in, int64_t out) override {
    if (!mixed()) {
      ops::grouped_linear_backward(x, w, offsets, groups, dy, dx, dw, in, out);
      return;
    }
    // Group by group, so only one expert's weights are rounded at a time.
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t r0 = offsets[g];
      linear_backward(x + r0 * in, w[g], dy + r0 * out, dx == nullptr ? nullptr : dx + r0 * in,
                      dw[g], offsets[g + 1] - r0, in, out);
    }
  }

  void swiglu_forward(const float* gate, const float* up, float* out, int64_t n) override {
    ops::swiglu_forward(gate, up, out, n);
  }
  void swiglu_backward(const float* gate, const float* up, const float* dout, float* dgate,
                       float* dup, int64_t n) override {
    ops::swiglu_backward(gate, up, dout, dgate, dup, n);
  }
  void softmax_forward(const float* x, float* p, int64_t n, int64_t e) override {
    ops::softmax_forward(x, p, n, e);
  }
  void softmax_backward(const float* p, const float* dp, float* dx, int64_t n,
                        int64_t e) override {
    ops::softmax_backward(p, dp, dx, n, e);
  }

  void rmsnorm_forward(const float* x, const float* weight, float* out, float* rstd, int64_t n,
                       int64_t d, float eps) override {
    ops::rmsnorm_forward(x, weight, out, rstd, n, d, eps);
  }
  void rmsnorm_backward(const float* x, const float* weight, const float* rstd,
                        const float* dout, float* dx, float* dweight, int64_t n,
                        int64_t d) override {
    ops::rmsnorm_backward(x, weight, rstd, dout, dx, dweight, n, d);
  }
  void rope_forward(float* x, const RopeTable& table, int64_t b, int64_t t,
                    int64_t heads) override {
    ops::rope_forward(x, table, b, t, heads);
  }
  void rope_backward(float* dx, const RopeTable& table, int64_t b, int64_t t,
                     int64_t heads) override {
    ops::rope_backward(dx, table, b, t, heads);
  }
  void rope_forward_at(float* x, const RopeTable& table, const int64_t* positions, int64_t n,
                       int64_t heads) override {
    ops::rope_forward_at(x, table, positions, n, heads);
  }
  void rope_backward_at(float* dx, const RopeTable& table, const int64_t* positions, int64_t n,
                        int64_t heads) override {
    ops::rope_backward_at(dx, table, positions, n, heads);
  }

  void attention_block_forward(const AttentionShape& s, const AttentionMask& mask,
                               const float* q, const float* k, const float* v, float* out,
                               float* lse) override {
    if (mixed()) round_qkv(s, q, k, v);
    ops::attention_block_forward(s, mask, q, k, v, out, lse);
  }
  void attention_merge(const AttentionShape& s, const float* out_b, const float* lse_b,
                       float* out, float* lse) override {
    ops::attention_merge(s, out_b, lse_b, out, lse);
  }
  void attention_block_backward(const AttentionShape& s, const AttentionMask& mask,
                                const float* q, const float* k, const float* v,
                                const float* out, const float* lse, const float* dout,
                                float* dq, float* dk, float* dv) override {
    if (mixed()) {
      round_qkv(s, q, k, v);
      dout = rounded_input(3, dout, s.q_elements());
    }
    ops::attention_block_backward(s, mask, q, k, v, out, lse, dout, dq, dk, dv);
  }

  void paged_kv_store(const PagedAttentionShape& s, const PagedQuery* queries, const float* k,
                      const float* v, float* k_cache, float* v_cache) override {
    ops::paged_kv_store(s, queries, k, v, k_cache, v_cache);
  }
  void paged_attention(const PagedAttentionShape& s, const PagedQuery* queries, const float* q,
                       const float* k_cache, const float* v_cache, float* out) override {
    ops::paged_attention(s, queries, q, k_cache, v_cache, out);
  }

  void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n,
                         int64_t d) override {
    ops::embedding_forward(ids, table, out, n, d);
  }
  void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                          int64_t d) override {
    ops::embedding_backward(ids, dout, dtable, n, d);
  }
  void softmax_cross_entropy(float* logits, const int32_t* targets, float* losses, int64_t n,
                             int64_t vocab, float grad_scale, bool write_grad) override {
    ops::softmax_cross_entropy(logits, targets, losses, n, vocab, grad_scale, write_grad);
  }
  void embedding_forward_range(const int32_t* ids, const float* table, float* out, int64_t n,
                               int64_t d, int64_t first, int64_t count) override {
    ops::embedding_forward_range(ids, table, out, n, d, first, count);
  }
  void embedding_backward_range(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                                int64_t d, int64_t first, int64_t count) override {
    ops::embedding_backward_range(ids, dout, dtable, n, d, first, count);
  }
  void vocab_row_max(const float* logits, int64_t ld, int64_t real, float* max,
                     int64_t n) override {
    ops::vocab_row_max(logits, ld, real, max, n);
  }
  void vocab_local_sums(const float* logits, int64_t ld, int64_t real, int64_t first,
                        const int32_t* targets, const float* max, float* pairs,
                        int64_t n) override {
    ops::vocab_local_sums(logits, ld, real, first, targets, max, pairs, n);
  }
  void vocab_losses(const float* max, const float* pairs, float* lse, float* losses,
                    int64_t n) override {
    ops::vocab_losses(max, pairs, lse, losses, n);
  }
  void vocab_local_grad(float* logits, int64_t ld, int64_t real, int64_t first,
                        const int32_t* targets, const float* lse, float grad_scale,
                        int64_t n) override {
    ops::vocab_local_grad(logits, ld, real, first, targets, lse, grad_scale, n);
  }

  MoeRouting moe_route(const float* probs, float* weights, int64_t n, int64_t e, int64_t k,
                       const float* bias) override {
    return ops::moe_route(probs, weights, n, e, k, bias);
  }
  void moe_apply_capacity(MoeRouting& r, int64_t capacity) override {
    ops::moe_apply_capacity(r, capacity);
  }
  void moe_update_expert_bias(const int64_t* counts, float* bias, int64_t e,
                              double rate) override {
    ops::moe_update_expert_bias(counts, bias, e, rate);
  }
  void moe_route_backward(const float* probs, const float* weights, const MoeRouting& r,
                          const float* dweights, float* dprobs) override {
    ops::moe_route_backward(probs, weights, r, dweights, dprobs);
  }
  void moe_permute_forward(const float* x, const MoeRouting& r, float* xp, int64_t d) override {
    ops::moe_permute_forward(x, r, xp, d);
  }
  void moe_permute_backward(const float* dxp, const MoeRouting& r, float* dx,
                            int64_t d) override {
    ops::moe_permute_backward(dxp, r, dx, d);
  }
  void moe_unpermute_forward(const float* yp, const float* weights, const MoeRouting& r,
                             float* y, int64_t d) override {
    ops::moe_unpermute_forward(yp, weights, r, y, d);
  }
  void moe_unpermute_backward(const float* yp, const float* weights, const MoeRouting& r,
                              const float* dy, float* dyp, float* dweights, int64_t d) override {
    ops::moe_unpermute_backward(yp, weights, r, dy, dyp, dweights, d);
  }
  double moe_aux_loss(const float* probs, const MoeRouting& r) override {
    return ops::moe_aux_loss(probs, r);
  }
  void moe_aux_loss_backward(const MoeRouting& r, float daux, float* dprobs) override {
    ops::moe_aux_loss_backward(r, daux, dprobs);
  }
  void moe_probability_sums(const float* probs, int64_t n, int64_t e, double* sums) override {
    ops::moe_probability_sums(probs, n, e, sums);
  }
  double moe_z_loss(const float* logits, float* lse, int64_t n, int64_t e) override {
    return ops::moe_z_loss(logits, lse, n, e);
  }
  void moe_z_loss_backward(const float* probs, const float* lse, float scale, float* dlogits,
                           int64_t n, int64_t e) override {
    ops::moe_z_loss_backward(probs, lse, scale, dlogits, n, e);
  }

  void quantized_linears(const float* x, std::span<const QuantLinearOut> outs, int64_t n,
                         ActivationFormat activations) override {
    ops::quantized_linears(x, outs, n, activations);
  }

  void add(const float* a, const float* b, float* out, int64_t n) override {
    ops::add(a, b, out, static_cast<size_t>(n));
  }
  void fill(float* x, int64_t n, float value) override {
    ops::fill(x, static_cast<size_t>(n), value);
  }
  void copy(const float* src, float* dst, int64_t n) override {
    ops::copy(src, dst, static_cast<size_t>(n));
  }
  void gather_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                   float* dst) override {
    ops::gather_rows(src, rows, count, width, dst);
  }
  void scatter_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                    float* dst) override {
    ops::scatter_rows(src, rows, count, width, dst);
  }
  void add_to_columns(float* x, const float* column, int64_t rows, int64_t cols) override {
    ops::add_to_columns(x, column, rows, cols);
  }

  void adamw_update(const AdamCoefficients& c, bool weight_decay, float* w, const float* g,
                    float* m, float* v, int64_t n) override {
    ops::adamw_update(c, weight_decay, w, g, m, v, n);
  }
  void lamb_direction(const AdamCoefficients& c, bool weight_decay, const float* w,
                      const float* g, float* m, float* v, float* d, double* norms,
                      int64_t n) override {
    ops::lamb_direction(c, weight_decay, w, g, m, v, d, norms, n);
  }
  void lamb_update(float step, const float* d, float* w, int64_t n) override {
    ops::lamb_update(step, d, w, n);
  }
  double sum_of_squares_f64(const float* x, int64_t n) override {
    return ops::sum_of_squares_f64(x, static_cast<size_t>(n));
  }

 private:
  // Mixed precision: the matmul-class ops read bf16.
  bool mixed() const { return precision_ == MatmulPrecision::kBf16; }
  static void round_qkv(const AttentionShape& s, const float*& q, const float*& k,
                        const float*& v) {
    q = rounded_input(0, q, s.q_elements());
    k = rounded_input(1, k, s.kv_elements());
    v = rounded_input(2, v, s.kv_elements());
  }

  MatmulPrecision precision_;
};

}  // namespace

Backend& cpu_backend(MatmulPrecision precision) {
  static CpuBackend f32(MatmulPrecision::kF32);
  static CpuBackend bf16(MatmulPrecision::kBf16);
  return precision == MatmulPrecision::kBf16 ? bf16 : f32;
}

}  // namespace ms::ops
