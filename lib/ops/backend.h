// The backend seam: the op set the model and the optimizer call, issued on one device's
// memory. Code above the seam (lib/model's blocks and layers, cached decode's paged attention,
// lib/train's optimizer updates and gradient norm) calls these and never an operator or a BLAS
// routine directly, so a second device is a second Backend, not a second model. The CPU backend
// (cpu_backend()) is lib/ops itself: each op below forwards to the lib/ops function of the same
// name, whose header documents its shapes and semantics; a CUDA backend implements the same
// ops with kernels/ on device pointers, each kernel checked against its CPU twin by the
// table-driven test (tests/ops/backend_test.cc).
//
// Pointers are addresses on the backend's device. Ops are issued on stream(): on the host they
// are done when the call returns; on a CUDA device they are enqueued, and a result read on
// another stream or by the host needs the runtime's record/wait or synchronize first
// (core/device_runtime.h). Routing (moe_route and its capacity) produces a host-side
// MoeRouting the caller keeps; its counts decide buffer sizes, so a device backend copies them
// back.
#pragma once

#include <cstdint>
#include <span>

#include "core/device.h"
#include "core/device_runtime.h"
#include "ops/attention.h"
#include "ops/moe.h"
#include "ops/optimizer.h"
#include "ops/paged_attention.h"
#include "ops/quant_act.h"
#include "ops/quant_gemm.h"
#include "ops/rope.h"

namespace ms::ops {

// The number format a backend's matmul-class ops read (mixed precision as in Megatron's bf16 or
// PyTorch autocast). kF32: fp32 throughout. kBf16: linear_forward, linear_backward,
// grouped_linear_backward, attention_block_forward and attention_block_backward round their
// matrix inputs (x, w, dy; q, k, v, dout) to the nearest bf16 before multiplying, then
// multiply and accumulate in fp32 and write fp32: the products of two bf16 values are exact in
// fp32, so a CPU and a GPU backend differ only in summation order. Everything else (norms,
// activations, the loss, the optimizer, master weights, gradients) stays fp32. The gradients
// treat the rounding as the identity, as every bf16 trainer does.
enum class MatmulPrecision { kF32, kBf16 };
const char* matmul_precision_name(MatmulPrecision p);

class Backend {
 public:
  virtual ~Backend() = default;
  // The device's allocator, streams and events.
  virtual DeviceRuntime& runtime() = 0;
  Device device() { return runtime().device(); }
  // The stream the ops below are issued on.
  virtual Stream stream() const = 0;
  // What the matmul-class ops read (above).
  virtual MatmulPrecision matmul_precision() const = 0;

  // ---- Linear layers, y = x W^T with W (out, in): ops/linear.h ----
  virtual void linear_forward(const float* x, const float* w, float* y, int64_t n, int64_t in,
                              int64_t out) = 0;
  virtual void linear_backward(const float* x, const float* w, const float* dy, float* dx,
                               float* dw, int64_t n, int64_t in, int64_t out) = 0;
  virtual void grouped_linear_backward(const float* x, const float* const* w,
                                       const int64_t* offsets, int64_t groups, const float* dy,
                                       float* dx, float* const* dw, int64_t in, int64_t out) = 0;

  // ---- Activations: ops/activation.h ----
  virtual void swiglu_forward(const float* gate, const float* up, float* out, int64_t n) = 0;
  virtual void swiglu_backward(const float* gate, const float* up, const float* dout,
                               float* dgate, float* dup, int64_t n) = 0;
  virtual void softmax_forward(const float* x, float* p, int64_t n, int64_t e) = 0;
  virtual void softmax_backward(const float* p, const float* dp, float* dx, int64_t n,
                                int64_t e) = 0;

  // ---- Normalization and rotary embeddings: ops/rmsnorm.h, ops/rope.h ----
  virtual void rmsnorm_forward(const float* x, const float* weight, float* out, float* rstd,
                               int64_t n, int64_t d, float eps) = 0;
  virtual void rmsnorm_backward(const float* x, const float* weight, const float* rstd,
                                const float* dout, float* dx, float* dweight, int64_t n,
                                int64_t d) = 0;
  virtual void rope_forward(float* x, const RopeTable& table, int64_t b, int64_t t,
                            int64_t heads) = 0;
  virtual void rope_backward(float* dx, const RopeTable& table, int64_t b, int64_t t,
                             int64_t heads) = 0;
  virtual void rope_forward_at(float* x, const RopeTable& table, const int64_t* positions,
                               int64_t n, int64_t heads) = 0;
  virtual void rope_backward_at(float* dx, const RopeTable& table, const int64_t* positions,
                                int64_t n, int64_t heads) = 0;

  // ---- Attention by key blocks, with the log-sum-exp ring merges need: ops/attention.h ----
  virtual void attention_block_forward(const AttentionShape& s, const AttentionMask& mask,
                                       const float* q, const float* k, const float* v,
                                       float* out, float* lse) = 0;
  virtual void attention_merge(const AttentionShape& s, const float* out_b, const float* lse_b,
                               float* out, float* lse) = 0;
  virtual void attention_block_backward(const AttentionShape& s, const AttentionMask& mask,
                                        const float* q, const float* k, const float* v,
                                        const float* out, const float* lse, const float* dout,
                                        float* dq, float* dk, float* dv) = 0;

  // ---- Attention over a paged key/value cache (cached passes): ops/paged_attention.h ----
  virtual void paged_kv_store(const PagedAttentionShape& s, const PagedQuery* queries,
                              const float* k, const float* v, float* k_cache,
                              float* v_cache) = 0;
  virtual void paged_attention(const PagedAttentionShape& s, const PagedQuery* queries,
                               const float* q, const float* k_cache, const float* v_cache,
                               float* out) = 0;

  // ---- Embedding and loss: ops/embedding.h, ops/cross_entropy.h ----
  virtual void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n,
                                 int64_t d) = 0;
  virtual void embedding_backward(const int32_t* ids, const float* dout, float* dtable,
                                  int64_t n, int64_t d) = 0;
  virtual void softmax_cross_entropy(float* logits, const int32_t* targets, float* losses,
                                     int64_t n, int64_t vocab, float grad_scale,
                                     bool write_grad) = 0;
  // The vocabulary-parallel forms' local pieces (parallel/vocab_parallel.h).
  virtual void embedding_forward_range(const int32_t* ids, const float* table, float* out,
                                       int64_t n, int64_t d, int64_t first, int64_t count) = 0;
  virtual void embedding_backward_range(const int32_t* ids, const float* dout, float* dtable,
                                        int64_t n, int64_t d, int64_t first,
                                        int64_t count) = 0;
  virtual void vocab_row_max(const float* logits, int64_t ld, int64_t real, float* max,
                             int64_t n) = 0;
  virtual void vocab_local_sums(const float* logits, int64_t ld, int64_t real, int64_t first,
                                const int32_t* targets, const float* max, float* pairs,
                                int64_t n) = 0;
  virtual void vocab_losses(const float* max, const float* pairs, float* lse, float* losses,
                            int64_t n) = 0;
  virtual void vocab_local_grad(float* logits, int64_t ld, int64_t real, int64_t first,
                                const int32_t* targets, const float* lse, float grad_scale,
                                int64_t n) = 0;

  // ---- Mixture of experts: ops/moe.h ----
  virtual MoeRouting moe_route(const float* probs, float* weights, int64_t n, int64_t e,
                               int64_t k, const float* bias) = 0;
  virtual void moe_apply_capacity(MoeRouting& r, int64_t capacity) = 0;
  virtual void moe_update_expert_bias(const int64_t* counts, float* bias, int64_t e,
                                      double rate) = 0;
  virtual void moe_route_backward(const float* probs, const float* weights, const MoeRouting& r,
                                  const float* dweights, float* dprobs) = 0;
  virtual void moe_permute_forward(const float* x, const MoeRouting& r, float* xp,
                                   int64_t d) = 0;
  virtual void moe_permute_backward(const float* dxp, const MoeRouting& r, float* dx,
                                    int64_t d) = 0;
  virtual void moe_unpermute_forward(const float* yp, const float* weights, const MoeRouting& r,
                                     float* y, int64_t d) = 0;
  virtual void moe_unpermute_backward(const float* yp, const float* weights,
                                      const MoeRouting& r, const float* dy, float* dyp,
                                      float* dweights, int64_t d) = 0;
  virtual double moe_aux_loss(const float* probs, const MoeRouting& r) = 0;
  virtual void moe_aux_loss_backward(const MoeRouting& r, float daux, float* dprobs) = 0;
  // Host-side result: a sum per expert.
  virtual void moe_probability_sums(const float* probs, int64_t n, int64_t e,
                                    double* sums) = 0;
  virtual double moe_z_loss(const float* logits, float* lse, int64_t n, int64_t e) = 0;
  virtual void moe_z_loss_backward(const float* probs, const float* lse, float scale,
                                   float* dlogits, int64_t n, int64_t e) = 0;

  // ---- Quantized linear layers (serving's weights): ops/quant_gemm.h ----
  virtual void quantized_linears(const float* x, std::span<const QuantLinearOut> outs,
                                 int64_t n, ActivationFormat activations) = 0;

  // ---- Element-wise: ops/elementwise.h ----
  // out[i] = a[i] + b[i] for i < n; out may be a or b (an order two ranks agree on, so both
  // get the same bits).
  virtual void add(const float* a, const float* b, float* out, int64_t n) = 0;
  // y[i] += x[i] for i < n: add(y, x, y).
  void add_into(float* y, const float* x, int64_t n) { add(y, x, y, n); }
  // Memory on the device: fill, copy (ranges may overlap), rows gathered or scattered by index
  // (rows: host indices), a value per column added to every row (column: host values, a
  // handful computed from routing statistics; a device backend uploads them).
  virtual void fill(float* x, int64_t n, float value) = 0;
  virtual void copy(const float* src, float* dst, int64_t n) = 0;
  virtual void gather_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                           float* dst) = 0;
  virtual void scatter_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                            float* dst) = 0;
  virtual void add_to_columns(float* x, const float* column, int64_t rows, int64_t cols) = 0;

  // ---- Optimizer updates and the gradient norm: ops/optimizer.h, ops/reduce.h ----
  virtual void adamw_update(const AdamCoefficients& c, bool weight_decay, float* w,
                            const float* g, float* m, float* v, int64_t n) = 0;
  virtual void lamb_direction(const AdamCoefficients& c, bool weight_decay, const float* w,
                              const float* g, float* m, float* v, float* d, double* norms,
                              int64_t n) = 0;
  virtual void lamb_update(float step, const float* d, float* w, int64_t n) = 0;
  virtual double sum_of_squares_f64(const float* x, int64_t n) = 0;
};

// lib/ops on the host: every op forwards to the lib/ops function of the same name; at kBf16 the
// matmul-class ops first round their inputs into per-thread scratch (ops/cast.h round_to_bf16).
Backend& cpu_backend(MatmulPrecision precision = MatmulPrecision::kF32);

}  // namespace ms::ops
