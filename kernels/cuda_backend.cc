// ops::Backend on a GPU: each op uploads its host-side arguments (one staging copy), calls its
// kernels/ entry point on the compute stream, and throws on a failed launch (cuda_backend.h).
#include "kernels/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "kernels/attention.cuh"
#include "kernels/cast.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/embedding_grouping.h"
#include "kernels/embedding_loss.cuh"
#include "kernels/gemm.cuh"
#include "kernels/memory_ops.cuh"
#include "kernels/moe.cuh"
#include "kernels/nn.cuh"
#include "kernels/optimizer.cuh"
#include "kernels/paged_attention.cuh"
#include "kernels/quant_gemm.cuh"
#include "kernels/sgemm_rate.h"
#include "ops/backend_registry.h"

namespace ms::kernels {
namespace {

using ops::Transpose;

// A device op that failed: the step cannot continue (cuda_backend.h).
void check(const Status& status, const char* op) {
  if (!status.ok()) {
    throw std::runtime_error(std::string("CUDA backend, ") + op + ": " + status.message());
  }
}

// Device memory that grows to the largest request and is reused: freeing the old block is
// stream ordered (cuda_runtime.h), so growing never waits.
class DeviceScratch {
 public:
  void* bytes(CudaRuntime& rt, const ms::Stream& stream, size_t n) {
    if (n > buffer_.size()) {
      Result<Buffer> grown = rt.allocator().allocate(std::max(n, 2 * buffer_.size()), stream);
      check(grown.status(), "device scratch");
      buffer_ = std::move(*grown);
    }
    return buffer_.data();
  }
  template <typename T>
  T* as(CudaRuntime& rt, const ms::Stream& stream, size_t count) {
    return static_cast<T*>(bytes(rt, stream, count * sizeof(T)));
  }

 private:
  Buffer buffer_;
};

// One op's host-side arguments, packed and copied to the device together. add() returns the
// offset of an array; after upload(), at() is its device address. cudaMemcpyAsync from pageable
// memory has staged the bytes when it returns, so the host arrays may change right after.
class Upload {
 public:
  template <typename T>
  size_t add(const T* data, size_t count) {
    const size_t offset = (host_.size() + 15) / 16 * 16;
    host_.resize(offset + count * sizeof(T));
    if (count != 0) std::memcpy(host_.data() + offset, data, count * sizeof(T));
    return offset;
  }
  void upload(CudaRuntime& rt, const ms::Stream& stream) {
    upload_patched<char>(rt, stream, 0, [](char*, char*) {});
  }
  // upload, after patch(staged array of T at `offset`, device base address) has rewritten
  // host addresses in the staged bytes into device ones.
  template <typename T, typename Patch>
  void upload_patched(CudaRuntime& rt, const ms::Stream& stream, size_t offset, Patch patch) {
    base_ = static_cast<char*>(device_.bytes(rt, stream, std::max<size_t>(host_.size(), 16)));
    if (offset < host_.size()) patch(reinterpret_cast<T*>(host_.data() + offset), base_);
    if (!host_.empty()) {
      check(cuda_status(cudaMemcpyAsync(base_, host_.data(), host_.size(),
                                        cudaMemcpyHostToDevice,
                                        static_cast<cudaStream_t>(stream.handle))),
            "upload of host arguments");
    }
    host_.clear();
  }
  template <typename T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }

 private:
  static Status cuda_status(cudaError_t err) {
    return err == cudaSuccess ? Status::OK() : cuda_error(err, "cudaMemcpyAsync", __FILE__, __LINE__);
  }
  std::vector<char> host_;
  DeviceScratch device_;
  char* base_ = nullptr;
};

class CudaBackend final : public ops::Backend {
 public:
  CudaBackend(CudaRuntime& rt, ops::MatmulPrecision precision)
      : rt_(rt), stream_(rt.default_stream()), precision_(precision) {}

  DeviceRuntime& runtime() override { return rt_; }
  ms::Stream stream() const override { return stream_; }
  ops::MatmulPrecision matmul_precision() const override { return precision_; }

  // ---- Linear layers: cuBLASLt with fp32 compute, the CPU's layouts (ops/linear.cc); at bf16
  // the operands are cast to bf16 scratch and multiplied on the tensor cores with fp32
  // accumulation and fp32 results (kernels::gemm_bf16) ----
  void linear_forward(const float* x, const float* w, float* y, int64_t n, int64_t in,
                      int64_t out) override {
    if (n == 0) return;
    if (mixed()) {
      const bf16* xb = to_bf16(bf16_inputs_[0], x, n * in, "linear_forward");
      const bf16* wb = to_bf16(bf16_inputs_[1], w, out * in, "linear_forward");
      check(gemm_bf16(Transpose::kNo, Transpose::kYes, n, out, in, 1.0f, xb, in, wb, in, 0.0f, y,
                      out, s()),
            "linear_forward (bf16)");
      return;
    }
    check(sgemm(Transpose::kNo, Transpose::kYes, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out, s()),
          "linear_forward");
  }
  void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                       int64_t n, int64_t in, int64_t out) override {
    if (n == 0) return;
    if (mixed()) {
      const bf16* dyb = to_bf16(bf16_inputs_[2], dy, n * out, "linear_backward");
      if (dx != nullptr) {
        const bf16* wb = to_bf16(bf16_inputs_[1], w, out * in, "linear_backward");
        check(gemm_bf16(Transpose::kNo, Transpose::kNo, n, in, out, 1.0f, dyb, out, wb, in, 1.0f,
                        dx, in, s()),
              "linear_backward (dx, bf16)");
      }
      if (dw != nullptr) {
        const bf16* xb = to_bf16(bf16_inputs_[0], x, n * in, "linear_backward");
        check(gemm_bf16(Transpose::kYes, Transpose::kNo, out, in, n, 1.0f, dyb, out, xb, in, 1.0f,
                        dw, in, s()),
              "linear_backward (dw, bf16)");
      }
      return;
    }
    if (dx != nullptr) {
      check(sgemm(Transpose::kNo, Transpose::kNo, n, in, out, 1.0f, dy, out, w, in, 1.0f, dx, in,
                  s()),
            "linear_backward (dx)");
    }
    if (dw != nullptr) {
      check(sgemm(Transpose::kYes, Transpose::kNo, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in,
                  s()),
            "linear_backward (dw)");
    }
  }
  void grouped_linear_backward(const float* x, const float* const* w, const int64_t* offsets,
                               int64_t groups, const float* dy, float* dx, float* const* dw,
                               int64_t in, int64_t out) override {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t r0 = offsets[g];
      linear_backward(x + r0 * in, w[g], dy + r0 * out, dx == nullptr ? nullptr : dx + r0 * in,
                      dw[g], offsets[g + 1] - r0, in, out);
    }
  }

  // ---- Activations, norms, rotary ----
  void swiglu_forward(const float* gate, const float* up, float* out, int64_t n) override {
    check(kernels::swiglu_forward(gate, up, out, n, s()), "swiglu_forward");
  }
  void swiglu_backward(const float* gate, const float* up, const float* dout, float* dgate,
                       float* dup, int64_t n) override {
    check(kernels::swiglu_backward(gate, up, dout, dgate, dup, n, s()), "swiglu_backward");
  }
  void softmax_forward(const float* x, float* p, int64_t n, int64_t e) override {
    check(kernels::softmax_forward(x, p, n, e, s()), "softmax_forward");
  }
  void softmax_backward(const float* p, const float* dp, float* dx, int64_t n,
                        int64_t e) override {
    check(kernels::softmax_backward(p, dp, dx, n, e, s()), "softmax_backward");
  }
  void rmsnorm_forward(const float* x, const float* weight, float* out, float* rstd, int64_t n,
                       int64_t d, float eps) override {
    check(kernels::rmsnorm_forward(x, weight, out, rstd, n, d, eps, s()), "rmsnorm_forward");
  }
  void rmsnorm_backward(const float* x, const float* weight, const float* rstd,
                        const float* dout, float* dx, float* dweight, int64_t n,
                        int64_t d) override {
    float* scratch = norm_scratch_.as<float>(rt_, stream_, rmsnorm_backward_scratch(n, d));
    check(kernels::rmsnorm_backward(x, weight, rstd, dout, dx, dweight, n, d, scratch, s()),
          "rmsnorm_backward");
  }
  void rope_forward(float* x, const ops::RopeTable& table, int64_t b, int64_t t,
                    int64_t heads) override {
    check(kernels::rope_forward(x, rope_view(table), b, t, heads, s()), "rope_forward");
  }
  void rope_backward(float* dx, const ops::RopeTable& table, int64_t b, int64_t t,
                     int64_t heads) override {
    check(kernels::rope_backward(dx, rope_view(table), b, t, heads, s()), "rope_backward");
  }
  void rope_forward_at(float* x, const ops::RopeTable& table, const int64_t* positions,
                       int64_t n, int64_t heads) override {
    const RopeTableView view = rope_view(table);
    const size_t at = up_.add(positions, static_cast<size_t>(n));
    up_.upload(rt_, stream_);
    check(kernels::rope_forward_at(x, view, up_.at<int64_t>(at), n, heads, s()),
          "rope_forward_at");
  }
  void rope_backward_at(float* dx, const ops::RopeTable& table, const int64_t* positions,
                        int64_t n, int64_t heads) override {
    const RopeTableView view = rope_view(table);
    const size_t at = up_.add(positions, static_cast<size_t>(n));
    up_.upload(rt_, stream_);
    check(kernels::rope_backward_at(dx, view, up_.at<int64_t>(at), n, heads, s()),
          "rope_backward_at");
  }

  // ---- Attention ----
  void attention_block_forward(const ops::AttentionShape& sh, const ops::AttentionMask& mask,
                               const float* q, const float* k, const float* v, float* out,
                               float* lse) override {
    if (mixed()) round_qkv(sh, q, k, v);
    const ops::AttentionMask m = upload_mask(sh, mask);
    check(kernels::attention_block_forward(sh, m, q, k, v, out, lse, s()),
          "attention_block_forward");
  }
  void attention_merge(const ops::AttentionShape& sh, const float* out_b, const float* lse_b,
                       float* out, float* lse) override {
    check(kernels::attention_merge(sh, out_b, lse_b, out, lse, s()), "attention_merge");
  }
  void attention_block_backward(const ops::AttentionShape& sh, const ops::AttentionMask& mask,
                                const float* q, const float* k, const float* v, const float* out,
                                const float* lse, const float* dout, float* dq, float* dk,
                                float* dv) override {
    if (mixed()) {
      round_qkv(sh, q, k, v);
      dout = rounded(rounded_inputs_[3], dout, sh.q_elements());
    }
    const ops::AttentionMask m = upload_mask(sh, mask);
    check(kernels::attention_block_backward(sh, m, q, k, v, out, lse, dout, dq, dk, dv, s()),
          "attention_block_backward");
  }
  void paged_kv_store(const ops::PagedAttentionShape& sh, const ops::PagedQuery* queries,
                      const float* k, const float* v, float* k_cache, float* v_cache) override {
    const ops::PagedQuery* q = upload_queries(sh, queries);
    check(kernels::paged_kv_store(sh, q, k, v, k_cache, v_cache, s()), "paged_kv_store");
  }
  void paged_attention(const ops::PagedAttentionShape& sh, const ops::PagedQuery* queries,
                       const float* q, const float* k_cache, const float* v_cache,
                       float* out) override {
    const ops::PagedQuery* dq = upload_queries(sh, queries);
    check(kernels::paged_attention(sh, dq, q, k_cache, v_cache, out, s()), "paged_attention");
  }

  // ---- Embedding and loss ----
  void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n,
                         int64_t d) override {
    const int32_t* dev = upload_one(ids, n);
    check(kernels::embedding_forward(dev, table, out, n, d, s()), "embedding_forward");
  }
  void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                          int64_t d) override {
    grouped_embedding_backward(ids, dout, dtable, n, d, 0, INT32_MAX, "embedding_backward");
  }
  void softmax_cross_entropy(float* logits, const int32_t* targets, float* losses, int64_t n,
                             int64_t vocab, float grad_scale, bool write_grad) override {
    const int32_t* dev = upload_one(targets, n);
    check(kernels::softmax_cross_entropy(logits, dev, losses, n, vocab, grad_scale, write_grad,
                                         s()),
          "softmax_cross_entropy");
  }
  void embedding_forward_range(const int32_t* ids, const float* table, float* out, int64_t n,
                               int64_t d, int64_t first, int64_t count) override {
    const int32_t* dev = upload_one(ids, n);
    check(kernels::embedding_forward_range(dev, table, out, n, d, first, count, s()),
          "embedding_forward_range");
  }
  void embedding_backward_range(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                                int64_t d, int64_t first, int64_t count) override {
    grouped_embedding_backward(ids, dout, dtable, n, d, first, count, "embedding_backward_range");
  }
  void vocab_row_max(const float* logits, int64_t ld, int64_t real, float* max,
                     int64_t n) override {
    check(kernels::vocab_row_max(logits, ld, real, max, n, s()), "vocab_row_max");
  }
  void vocab_local_sums(const float* logits, int64_t ld, int64_t real, int64_t first,
                        const int32_t* targets, const float* max, float* pairs,
                        int64_t n) override {
    const int32_t* dev = upload_one(targets, n);
    check(kernels::vocab_local_sums(logits, ld, real, first, dev, max, pairs, n, s()),
          "vocab_local_sums");
  }
  void vocab_losses(const float* max, const float* pairs, float* lse, float* losses,
                    int64_t n) override {
    check(kernels::vocab_losses(max, pairs, lse, losses, n, s()), "vocab_losses");
  }
  void vocab_local_grad(float* logits, int64_t ld, int64_t real, int64_t first,
                        const int32_t* targets, const float* lse, float grad_scale,
                        int64_t n) override {
    const int32_t* dev = upload_one(targets, n);
    check(kernels::vocab_local_grad(logits, ld, real, first, dev, lse, grad_scale, n, s()),
          "vocab_local_grad");
  }

  // ---- Mixture of experts: routing on the host (its counts size the buffers) ----
  ops::MoeRouting moe_route(const float* probs, float* weights, int64_t n, int64_t e, int64_t k,
                            const float* bias) override {
    std::vector<float> host_probs = download(probs, static_cast<size_t>(n * e), "moe_route");
    std::vector<float> host_bias;
    if (bias != nullptr) host_bias = download(bias, static_cast<size_t>(e), "moe_route");
    std::vector<float> host_weights(static_cast<size_t>(n * k));
    ops::MoeRouting r = ops::moe_route(host_probs.data(), host_weights.data(), n, e, k,
                                       bias != nullptr ? host_bias.data() : nullptr);
    upload_to(weights, host_weights, "moe_route");
    return r;
  }
  void moe_apply_capacity(ops::MoeRouting& r, int64_t capacity) override {
    ops::moe_apply_capacity(r, capacity);
  }
  void moe_update_expert_bias(const int64_t* counts, float* bias, int64_t e,
                              double rate) override {
    std::vector<float> host = download(bias, static_cast<size_t>(e), "moe_update_expert_bias");
    ops::moe_update_expert_bias(counts, host.data(), e, rate);
    upload_to(bias, host, "moe_update_expert_bias");
  }
  void moe_route_backward(const float* probs, const float* weights, const ops::MoeRouting& r,
                          const float* dweights, float* dprobs) override {
    const MoeRoutingView view = routing_view(r);
    check(kernels::moe_route_backward(probs, weights, view, dweights, dprobs, s()),
          "moe_route_backward");
  }
  void moe_permute_forward(const float* x, const ops::MoeRouting& r, float* xp,
                           int64_t d) override {
    const MoeRoutingView view = routing_view(r);
    check(kernels::moe_permute_forward(x, view, xp, d, s()), "moe_permute_forward");
  }
  void moe_permute_backward(const float* dxp, const ops::MoeRouting& r, float* dx,
                            int64_t d) override {
    const MoeRoutingView view = routing_view(r);
    check(kernels::moe_permute_backward(dxp, view, dx, d, s()), "moe_permute_backward");
  }
  void moe_unpermute_forward(const float* yp, const float* weights, const ops::MoeRouting& r,
                             float* y, int64_t d) override {
    const MoeRoutingView view = routing_view(r);
    check(kernels::moe_unpermute_forward(yp, weights, view, y, d, s()), "moe_unpermute_forward");
  }
  void moe_unpermute_backward(const float* yp, const float* weights, const ops::MoeRouting& r,
                              const float* dy, float* dyp, float* dweights, int64_t d) override {
    const MoeRoutingView view = routing_view(r);
    check(kernels::moe_unpermute_backward(yp, weights, view, dy, dyp, dweights, d, s()),
          "moe_unpermute_backward");
  }
  double moe_aux_loss(const float* probs, const ops::MoeRouting& r) override {
    const MoeRoutingView view = routing_view(r);
    double* out = results_.as<double>(rt_, stream_, 1);
    check(kernels::moe_aux_loss(probs, view, out, s()), "moe_aux_loss");
    return download(out, 1, "moe_aux_loss")[0];
  }
  void moe_aux_loss_backward(const ops::MoeRouting& r, float daux, float* dprobs) override {
    const MoeRoutingView view = routing_view(r);
    check(kernels::moe_aux_loss_backward(view, daux, dprobs, s()), "moe_aux_loss_backward");
  }
  void moe_probability_sums(const float* probs, int64_t n, int64_t e, double* sums) override {
    double* out = results_.as<double>(rt_, stream_, static_cast<size_t>(e));
    check(kernels::moe_probability_sums(probs, n, e, out, s()), "moe_probability_sums");
    const std::vector<double> host = download(out, static_cast<size_t>(e), "moe_probability_sums");
    std::copy(host.begin(), host.end(), sums);
  }
  double moe_z_loss(const float* logits, float* lse, int64_t n, int64_t e) override {
    double* out = results_.as<double>(rt_, stream_, 1);
    check(kernels::moe_z_loss(logits, lse, n, e, out, s()), "moe_z_loss");
    return download(out, 1, "moe_z_loss")[0];
  }
  void moe_z_loss_backward(const float* probs, const float* lse, float scale, float* dlogits,
                           int64_t n, int64_t e) override {
    check(kernels::moe_z_loss_backward(probs, lse, scale, dlogits, n, e, s()),
          "moe_z_loss_backward");
  }

  // ---- Serving's quantized linears ----
  void quantized_linears(const float* x, std::span<const ops::QuantLinearOut> outs, int64_t n,
                         ops::ActivationFormat activations) override {
    for (const ops::QuantLinearOut& o : outs) {
      check(kernels::quantized_linear(x, o.w, o.y, n, activations, s()), "quantized_linears");
    }
  }

  // ---- Element-wise and memory ----
  void add(const float* a, const float* b, float* out, int64_t n) override {
    check(kernels::add(a, b, out, static_cast<size_t>(n), s()), "add");
  }
  void fill(float* x, int64_t n, float value) override {
    check(kernels::fill(x, n, value, s()), "fill");
  }
  void copy(const float* src, float* dst, int64_t n) override {
    check(kernels::copy(src, dst, n, s()), "copy");
  }
  void gather_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                   float* dst) override {
    const int64_t* dev = upload_one(rows, count);
    check(kernels::gather_rows(src, dev, count, width, dst, s()), "gather_rows");
  }
  void scatter_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                    float* dst) override {
    const int64_t* dev = upload_one(rows, count);
    check(kernels::scatter_rows(src, dev, count, width, dst, s()), "scatter_rows");
  }
  void add_to_columns(float* x, const float* column, int64_t rows, int64_t cols) override {
    const float* dev = upload_one(column, cols);
    check(kernels::add_to_columns(x, dev, rows, cols, s()), "add_to_columns");
  }

  // ---- Optimizer ----
  void adamw_update(const ops::AdamCoefficients& c, bool weight_decay, float* w, const float* g,
                    float* m, float* v, int64_t n) override {
    check(kernels::adamw_update(c, weight_decay, w, g, m, v, n, s()), "adamw_update");
  }
  void lamb_direction(const ops::AdamCoefficients& c, bool weight_decay, const float* w,
                      const float* g, float* m, float* v, float* d, double* norms,
                      int64_t n) override {
    double* out = results_.as<double>(rt_, stream_, 2);
    check(kernels::lamb_direction(c, weight_decay, w, g, m, v, d, out, n, s()),
          "lamb_direction");
    const std::vector<double> host = download(out, 2, "lamb_direction");
    norms[0] = host[0];
    norms[1] = host[1];
  }
  void lamb_update(float step, const float* d, float* w, int64_t n) override {
    check(kernels::lamb_update(step, d, w, n, s()), "lamb_update");
  }
  double sum_of_squares_f64(const float* x, int64_t n) override {
    double* out = results_.as<double>(rt_, stream_, 1);
    check(kernels::sum_of_squares_f64(x, n, out, s()), "sum_of_squares_f64");
    return download(out, 1, "sum_of_squares_f64")[0];
  }

 private:
  CudaRuntime& rt_;
  ms::Stream stream_;
  ops::MatmulPrecision precision_;
  Upload up_;
  DeviceScratch results_;      // device scalars the host reads back
  DeviceScratch norm_scratch_;  // rmsnorm_backward's partial column sums
  // At bf16: a linear op's x, w and dy cast to bf16, and attention's q, k, v and dout rounded
  // to bf16 in fp32, each reused by the next op on the stream. The weights are cast on every
  // call, not kept cast between optimizer steps (a 1B model's weights are about 3% of a step's
  // memory traffic at 8k tokens).
  DeviceScratch bf16_inputs_[3];
  DeviceScratch rounded_inputs_[4];

  // Mixed precision: the matmul-class ops read bf16.
  bool mixed() const { return precision_ == ops::MatmulPrecision::kBf16; }
  const bf16* to_bf16(DeviceScratch& scratch, const float* x, int64_t n, const char* op) {
    bf16* out = scratch.as<bf16>(rt_, stream_, static_cast<size_t>(n));
    check(f32_to_bf16(x, out, static_cast<size_t>(n), s()), op);
    return out;
  }
  const float* rounded(DeviceScratch& scratch, const float* x, int64_t n) {
    if (x == nullptr) return nullptr;
    float* out = scratch.as<float>(rt_, stream_, static_cast<size_t>(n));
    check(round_to_bf16(x, out, static_cast<size_t>(n), s()), "round_to_bf16");
    return out;
  }
  void round_qkv(const ops::AttentionShape& sh, const float*& q, const float*& k,
                 const float*& v) {
    q = rounded(rounded_inputs_[0], q, sh.q_elements());
    k = rounded(rounded_inputs_[1], k, sh.kv_elements());
    v = rounded(rounded_inputs_[2], v, sh.kv_elements());
  }
  // A host table's device copy. A table freed and another made at the same address is told
  // apart by its last cos and sin, which depend on the base (rope_theta) through the lowest
  // frequency, so a stale copy is never used.
  struct RopeUpload {
    const float* cos = nullptr;  // the host table it was made from
    int64_t seq_len = 0, half = 0;
    float last_cos = 0, last_sin = 0;
    Buffer device;
    bool holds(const ops::RopeTable& t) const {
      return cos == t.cos.data() && seq_len == t.seq_len && half == t.half &&
             (t.cos.empty() || (last_cos == t.cos.back() && last_sin == t.sin.back()));
    }
  };
  std::vector<RopeUpload> ropes_;  // one per distinct table (a model has one or two)

  kernels::Stream s() const { return stream_.handle; }

  template <typename T>
  const T* upload_one(const T* host, int64_t count) {
    const size_t at = up_.add(host, static_cast<size_t>(count));
    up_.upload(rt_, stream_);
    return up_.at<T>(at);
  }

  template <typename T>
  std::vector<T> download(const T* device, size_t count, const char* op) {
    std::vector<T> host(count);
    if (count == 0) return host;
    const cudaError_t err = cudaMemcpyAsync(host.data(), device, count * sizeof(T),
                                            cudaMemcpyDeviceToHost,
                                            static_cast<cudaStream_t>(s()));
    if (err == cudaSuccess) {
      check(rt_.synchronize(stream_), op);
    } else {
      check(cuda_error(err, "cudaMemcpyAsync", __FILE__, __LINE__), op);
    }
    return host;
  }

  void upload_to(float* device, const std::vector<float>& host, const char* op) {
    if (host.empty()) return;
    const cudaError_t err =
        cudaMemcpyAsync(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice,
                        static_cast<cudaStream_t>(s()));
    if (err != cudaSuccess) check(cuda_error(err, "cudaMemcpyAsync", __FILE__, __LINE__), op);
  }

  // The table's device copy, uploaded once: a model keeps its table for its whole life.
  RopeTableView rope_view(const ops::RopeTable& table) {
    for (RopeUpload& r : ropes_) {
      if (r.holds(table)) {
        const float* base = static_cast<const float*>(r.device.data());
        return {base, base + table.cos.size(), table.seq_len, table.half};
      }
    }
    const size_t n = table.cos.size();
    Result<Buffer> buffer = rt_.allocator().allocate(2 * n * sizeof(float), stream_);
    check(buffer.status(), "rope table");
    float* base = static_cast<float*>(buffer->data());
    upload_to(base, table.cos, "rope table");
    upload_to(base + n, table.sin, "rope table");
    // A stale copy of a table once at this address is dropped (freed stream-ordered).
    std::erase_if(ropes_, [&](const RopeUpload& r) { return r.cos == table.cos.data(); });
    ropes_.push_back({table.cos.data(), table.seq_len, table.half,
                      n != 0 ? table.cos.back() : 0.0f, n != 0 ? table.sin.back() : 0.0f,
                      std::move(*buffer)});
    return {base, base + n, table.seq_len, table.half};
  }

  ops::AttentionMask upload_mask(const ops::AttentionShape& sh, const ops::AttentionMask& mask) {
    const size_t q = static_cast<size_t>(sh.batch * sh.seq);
    const size_t k = static_cast<size_t>(sh.batch * (sh.kv_seq != 0 ? sh.kv_seq : sh.seq));
    size_t at[6] = {};
    if (mask.q_index) at[0] = up_.add(mask.q_index, q);
    if (mask.k_index) at[1] = up_.add(mask.k_index, k);
    if (mask.q_doc.i32) at[2] = up_.add(mask.q_doc.i32, q);
    if (mask.q_doc.i64) at[3] = up_.add(mask.q_doc.i64, q);
    if (mask.k_doc.i32) at[4] = up_.add(mask.k_doc.i32, k);
    if (mask.k_doc.i64) at[5] = up_.add(mask.k_doc.i64, k);
    up_.upload(rt_, stream_);
    ops::AttentionMask m;
    if (mask.q_index) m.q_index = up_.at<int64_t>(at[0]);
    if (mask.k_index) m.k_index = up_.at<int64_t>(at[1]);
    if (mask.q_doc.i32) m.q_doc.i32 = up_.at<int32_t>(at[2]);
    if (mask.q_doc.i64) m.q_doc.i64 = up_.at<int64_t>(at[3]);
    if (mask.k_doc.i32) m.k_doc.i32 = up_.at<int32_t>(at[4]);
    if (mask.k_doc.i64) m.k_doc.i64 = up_.at<int64_t>(at[5]);
    return m;
  }

  // The queries with their block tables on the device: a table is uploaded once per call
  // however many of the call's tokens share it, as long as its longest reader needs.
  const ops::PagedQuery* upload_queries(const ops::PagedAttentionShape& sh,
                                        const ops::PagedQuery* queries) {
    std::map<const int32_t*, int64_t> tables;  // host table -> blocks its readers need
    for (int64_t i = 0; i < sh.tokens; ++i) {
      int64_t& need = tables[queries[i].blocks];
      need = std::max(need, queries[i].pos / sh.block_size + 1);
    }
    std::map<const int32_t*, size_t> table_at;
    for (const auto& [table, need] : tables) {
      table_at[table] = up_.add(table, static_cast<size_t>(need));
    }
    std::vector<ops::PagedQuery> device_queries(queries, queries + sh.tokens);
    const size_t queries_at = up_.add(device_queries.data(), device_queries.size());
    // The queries' table pointers are only known once the staging has its device address, so
    // they are patched in the staged bytes before the upload.
    up_.upload_patched<ops::PagedQuery>(rt_, stream_, queries_at, [&](ops::PagedQuery* staged,
                                                                      char* device_base) {
      for (int64_t i = 0; i < sh.tokens; ++i) {
        staged[i].blocks =
            reinterpret_cast<const int32_t*>(device_base + table_at[queries[i].blocks]);
      }
    });
    return up_.at<ops::PagedQuery>(queries_at);
  }

  MoeRoutingView routing_view(const ops::MoeRouting& r) {
    const size_t expert = up_.add(r.expert.data(), r.expert.size());
    const size_t offsets = up_.add(r.offsets.data(), r.offsets.size());
    const size_t row_of = up_.add(r.row_of.data(), r.row_of.size());
    const size_t token_of_row = up_.add(r.token_of_row.data(), r.token_of_row.size());
    const size_t routed = up_.add(r.routed.data(), r.routed.size());
    up_.upload(rt_, stream_);
    MoeRoutingView v;
    v.tokens = r.tokens;
    v.experts = r.experts;
    v.top_k = r.top_k;
    v.rows = r.rows();
    v.expert = up_.at<int32_t>(expert);
    v.offsets = up_.at<int64_t>(offsets);
    v.row_of = up_.at<int64_t>(row_of);
    v.token_of_row = up_.at<int64_t>(token_of_row);
    v.routed = up_.at<int64_t>(routed);
    return v;
  }

  // Deterministic: the tokens of each table row are summed in order by one block
  // (kernels/embedding_grouping.h); the grouping is made here, where the ids are.
  void grouped_embedding_backward(const int32_t* ids, const float* dout, float* dtable,
                                  int64_t n, int64_t d, int64_t first, int64_t count,
                                  const char* op) {
    const EmbeddingGrouping g = group_tokens_by_row(ids, n, first, count);
    if (g.groups() == 0) return;
    const size_t rows = up_.add(g.rows.data(), g.rows.size());
    const size_t starts = up_.add(g.starts.data(), g.starts.size());
    const size_t tokens = up_.add(g.tokens.data(), g.tokens.size());
    up_.upload(rt_, stream_);
    check(embedding_backward_grouped(up_.at<int32_t>(rows), up_.at<int64_t>(starts),
                                     up_.at<int64_t>(tokens), g.groups(), dout, dtable, d, s()),
          op);
  }
};

// ---- The registry's CUDA entry: one runtime and backend per device, made on first use ----

struct OpenDevice {
  std::unique_ptr<CudaRuntime> runtime;
  std::unique_ptr<ops::Backend> f32_backend, bf16_backend;  // sharing the runtime
  ops::Backend* backend(ops::MatmulPrecision p) const {
    return p == ops::MatmulPrecision::kBf16 ? bf16_backend.get() : f32_backend.get();
  }
};

std::mutex open_mutex;
std::map<int, OpenDevice>& open_devices() {
  static auto* devices = new std::map<int, OpenDevice>();  // kept to exit: tensors may outlive
  return *devices;
}

Result<ops::Backend*> open_cuda(Device device, ops::MatmulPrecision precision) {
  std::lock_guard<std::mutex> lock(open_mutex);
  auto& devices = open_devices();
  const auto found = devices.find(device.index);
  if (found != devices.end()) return found->second.backend(precision);
  CudaRuntimeOptions options;
  options.ordinal = device.index;
  if (const char* fraction = std::getenv("MS_CUDA_ARENA_FRACTION")) {
    options.fraction = std::strtod(fraction, nullptr);
    if (!(options.fraction > 0 && options.fraction <= 1)) {
      return InvalidArgument(std::string("MS_CUDA_ARENA_FRACTION must be in (0, 1], got '") +
                             fraction + "'");
    }
  }
  Result<std::unique_ptr<CudaRuntime>> runtime = CudaRuntime::create(options);
  if (!runtime.ok()) {
    return Status(runtime.status().code(),
                  device_name(device) + " cannot be used: " + runtime.status().message());
  }
  OpenDevice& open = devices[device.index];
  open.runtime = std::move(*runtime);
  open.f32_backend = make_cuda_backend(*open.runtime, ops::MatmulPrecision::kF32);
  open.bf16_backend = make_cuda_backend(*open.runtime, ops::MatmulPrecision::kBf16);
  return open.backend(precision);
}

ops::DeviceMemory memory_of(Device device) {
  std::lock_guard<std::mutex> lock(open_mutex);
  const auto found = open_devices().find(device.index);
  if (found == open_devices().end()) return {};
  const ArenaUsage u = found->second.runtime->usage();
  return {u.in_use, u.peak, u.capacity};
}

std::string describe_cuda(Device device) {
  std::lock_guard<std::mutex> lock(open_mutex);
  const auto found = open_devices().find(device.index);
  return found == open_devices().end() ? device_name(device)
                                       : found->second.runtime->description();
}

// n = 2048 fills an H100's SMs at f32 and 4096 on the tensor cores; five repetitions after the
// warm-up take well under a second each.
Result<ops::DeviceRates> rates_of(Device device) {
  MS_RETURN_IF_ERROR(set_device(device.index));
  ops::DeviceRates r;
  MS_ASSIGN_OR_RETURN(r.peak_gflops, device_peak_gflops(GemmPrecision::kF32));
  MS_ASSIGN_OR_RETURN(r.bf16_peak_gflops, device_peak_gflops(GemmPrecision::kBf16));
  MS_ASSIGN_OR_RETURN(r.measured_gflops, measure_sgemm_gflops(2048, 5));
  MS_ASSIGN_OR_RETURN(r.bf16_measured_gflops, measure_gemm_bf16_gflops(4096, 5));
  return r;
}

}  // namespace

std::unique_ptr<ops::Backend> make_cuda_backend(CudaRuntime& runtime,
                                               ops::MatmulPrecision precision) {
  return std::make_unique<CudaBackend>(runtime, precision);
}

void register_cuda_backend() {
  ops::register_cuda_backends({&open_cuda, &memory_of, &describe_cuda, &rates_of});
}

}  // namespace ms::kernels
