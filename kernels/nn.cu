// Layer kernels: SwiGLU and softmax (ops/activation.cc), RMSNorm (ops/rmsnorm.cc) and rotary
// embeddings (ops/rope.cc). Products and sums go through __fmul_rn/__fadd_rn/__fsub_rn where
// the CPU twin rounds them separately, so nvcc cannot contract them into an FMA that the CPU
// (x86-64 without -mfma) does not perform; what still differs from the twin is expf and the
// order of the double row sums.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/nn.cuh"
#include "kernels/row_reduce_device.h"

namespace ms::kernels {
namespace {

using row_reduce::kWarpSize;
using row_reduce::kWarpsPerBlock;

__device__ size_t first_index() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ size_t grid_stride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

__device__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// ---- SwiGLU ----

__global__ void swiglu_forward_kernel(const float* gate, const float* up, float* out,
                                      size_t n) {
  for (size_t i = first_index(); i < n; i += grid_stride()) {
    const float g = gate[i];
    out[i] = __fmul_rn(__fmul_rn(g, sigmoid(g)), up[i]);
  }
}

// silu'(g) = s * (1 + g * (1 - s)) with s = sigmoid(g), rounded step by step as on the CPU.
__global__ void swiglu_backward_kernel(const float* gate, const float* up, const float* dout,
                                       float* dgate, float* dup, size_t n) {
  for (size_t i = first_index(); i < n; i += grid_stride()) {
    const float g = gate[i], s = sigmoid(g), dy = dout[i];
    const float slope = __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, s))));
    dgate[i] = __fadd_rn(dgate[i], __fmul_rn(__fmul_rn(dy, up[i]), slope));
    dup[i] = __fadd_rn(dup[i], __fmul_rn(dy, __fmul_rn(g, s)));
  }
}

// ---- Softmax: one warp per row (rows are the router's e experts: a few dozen values) ----

__device__ int64_t first_warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
}
__device__ int64_t warp_row_stride() {
  return static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
}

__global__ void softmax_forward_kernel(const float* x, float* p, int64_t n, int64_t e) {
  const int64_t lane = threadIdx.x % kWarpSize;
  for (int64_t row = first_warp_row(); row < n; row += warp_row_stride()) {
    const float* xi = x + row * e;
    float* pi = p + row * e;
    float m = -INFINITY;
    for (int64_t j = lane; j < e; j += kWarpSize) m = row_reduce::Max{}(m, xi[j]);
    m = row_reduce::warp_fold(m, row_reduce::Max{});
    double sum = 0;
    for (int64_t j = lane; j < e; j += kWarpSize) {
      const float v = expf(__fsub_rn(xi[j], m));
      pi[j] = v;
      sum += v;
    }
    sum = row_reduce::warp_fold(sum, row_reduce::Sum{});
    const float inv = static_cast<float>(1.0 / sum);
    // Each lane rescales the values it wrote itself: no synchronization needed.
    for (int64_t j = lane; j < e; j += kWarpSize) pi[j] = __fmul_rn(pi[j], inv);
  }
}

__global__ void softmax_backward_kernel(const float* p, const float* dp, float* dx, int64_t n,
                                        int64_t e) {
  const int64_t lane = threadIdx.x % kWarpSize;
  for (int64_t row = first_warp_row(); row < n; row += warp_row_stride()) {
    const float* pi = p + row * e;
    const float* gi = dp + row * e;
    double dot = 0;
    for (int64_t j = lane; j < e; j += kWarpSize) {
      dot = __dadd_rn(dot, __dmul_rn(pi[j], gi[j]));
    }
    const float dot_f = static_cast<float>(row_reduce::warp_fold(dot, row_reduce::Sum{}));
    float* dxi = dx + row * e;
    for (int64_t j = lane; j < e; j += kWarpSize) {
      dxi[j] = __fadd_rn(dxi[j], __fmul_rn(pi[j], __fsub_rn(gi[j], dot_f)));
    }
  }
}

// ---- RMSNorm: one block per row; dweight by row chunks, then the chunks in order ----

__global__ void rmsnorm_forward_kernel(const float* x, const float* weight, float* out,
                                       float* rstd, int64_t n, int64_t d, float eps) {
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const float* xi = x + row * d;
    double sum_sq = 0;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      sum_sq = __dadd_rn(sum_sq, __dmul_rn(xi[c], xi[c]));
    }
    sum_sq = row_reduce::block_fold(sum_sq, row_reduce::Sum{});
    const float r = static_cast<float>(1.0 / sqrt(sum_sq / static_cast<double>(d) + eps));
    if (threadIdx.x == 0) rstd[row] = r;
    float* oi = out + row * d;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      oi[c] = __fmul_rn(weight[c], __fmul_rn(xi[c], r));
    }
  }
}

// dx += r * (w * dy) - x * k with k = r^3 / d * sum_c(w_c * dy_c * x_c), the sum in double.
__global__ void rmsnorm_backward_rows_kernel(const float* x, const float* weight,
                                             const float* rstd, const float* dout, float* dx,
                                             int64_t n, int64_t d) {
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const float* xi = x + row * d;
    const float* gi = dout + row * d;
    double dot = 0;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      dot = __dadd_rn(dot, __dmul_rn(__dmul_rn(weight[c], gi[c]), xi[c]));
    }
    dot = row_reduce::block_fold(dot, row_reduce::Sum{});
    const float r = rstd[row];
    const double r_d = r;
    const float k = static_cast<float>(dot * r_d * r_d * r_d / static_cast<double>(d));
    float* dxi = dx + row * d;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      const float term = __fsub_rn(__fmul_rn(r, __fmul_rn(weight[c], gi[c])), __fmul_rn(xi[c], k));
      dxi[c] = __fadd_rn(dxi[c], term);
    }
  }
}

// Block (x: a run of kBlockThreads columns, y: a chunk of rows): partials[chunk][c] = the sum
// over the chunk's rows, in row order, of dy * (x * rstd).
__global__ void rmsnorm_dweight_partials_kernel(const float* x, const float* rstd,
                                                const float* dout, float* partials, int64_t n,
                                                int64_t d, int64_t rows_per_chunk) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= d) return;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < n ? begin + rows_per_chunk : n;
  float acc = 0.0f;
  for (int64_t row = begin; row < end; ++row) {
    acc = __fadd_rn(acc, __fmul_rn(dout[row * d + c], __fmul_rn(x[row * d + c], rstd[row])));
  }
  partials[static_cast<int64_t>(blockIdx.y) * d + c] = acc;
}

// dweight[c] += the chunks' partials in chunk order.
__global__ void rmsnorm_dweight_finish_kernel(const float* partials, int64_t chunks,
                                              float* dweight, int64_t d) {
  for (size_t c = first_index(); c < static_cast<size_t>(d); c += grid_stride()) {
    float acc = 0.0f;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) acc = __fadd_rn(acc, partials[chunk * d + c]);
    dweight[c] = __fadd_rn(dweight[c], acc);
  }
}

// ---- Rotary embeddings ----

// One thread per rotated pair (token, head, i < half); token at positions[token], or at
// token % t_len when positions is null. sign is +1 (forward) or -1 (the inverse rotation).
__global__ void rope_kernel(float* x, const float* cos_table, const float* sin_table,
                            int64_t seq_len, int64_t half, const int64_t* positions,
                            int64_t t_len, int64_t heads, size_t pairs, float sign) {
  for (size_t w = first_index(); w < pairs; w += grid_stride()) {
    const int64_t i = static_cast<int64_t>(w % static_cast<size_t>(half));
    const int64_t token_head = static_cast<int64_t>(w / static_cast<size_t>(half));
    const int64_t token = token_head / heads;
    const int64_t pos = positions != nullptr ? positions[token] : token % t_len;
    if (pos < 0 || pos >= seq_len) continue;  // documented: left unrotated
    const float c = cos_table[pos * half + i];
    const float sn = sign * sin_table[pos * half + i];
    float* v = x + token_head * 2 * half;
    const float x1 = v[i], x2 = v[i + half];
    v[i] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, sn));
    v[i + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, sn));
  }
}

unsigned elementwise_grid(size_t n) { return blocks_for(n, kMaxElementwiseBlocks); }
unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(rows, kMaxElementwiseBlocks));
}
unsigned warp_row_grid(int64_t rows) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 1, kMaxElementwiseBlocks));
}
cudaStream_t cuda(Stream stream) { return static_cast<cudaStream_t>(stream); }

// Rows per dweight chunk aim at this many, with at most kMaxDweightChunks chunks (so the
// scratch stays small and the second pass short).
constexpr int64_t kDweightRowsPerChunk = 64;
constexpr int64_t kMaxDweightChunks = 256;
int64_t dweight_chunks(int64_t n) {
  return std::clamp<int64_t>((n + kDweightRowsPerChunk - 1) / kDweightRowsPerChunk, 1,
                             kMaxDweightChunks);
}

// n rows of `width` values: n >= 0, and width >= 1 when there are rows (a row of nothing has
// no maximum and no norm).
Status check_rows(const char* op, int64_t n, int64_t width, const char* width_name) {
  MS_RETURN_IF_ERROR(check_at_least(op, "n", n, 0));
  return check_at_least(op, width_name, width, n > 0 ? 1 : 0);
}

Status check_table(const char* op, const RopeTableView& t) {
  MS_RETURN_IF_ERROR(check_at_least(op, "table.seq_len", t.seq_len, 0));
  MS_RETURN_IF_ERROR(check_at_least(op, "table.half", t.half, 1));
  MS_RETURN_IF_ERROR(check_buffer(op, "table.cos", t.cos, elements(t.seq_len, t.half)));
  return check_buffer(op, "table.sin", t.sin, elements(t.seq_len, t.half));
}

Status launch_rope(float* x, const RopeTableView& t, const int64_t* positions,
                   int64_t tokens, int64_t t_len, int64_t heads, float sign, Stream stream) {
  const size_t pairs = elements(tokens, heads) * static_cast<size_t>(t.half);
  if (pairs == 0) return Status::OK();
  rope_kernel<<<elementwise_grid(pairs), kBlockThreads, 0, cuda(stream)>>>(
      x, t.cos, t.sin, t.seq_len, t.half, positions, t_len, heads, pairs, sign);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status rope_sequence(const char* op, float* x, const RopeTableView& t, int64_t b, int64_t t_len,
                     int64_t heads, float sign, Stream stream) {
  MS_RETURN_IF_ERROR(check_at_least(op, "b", b, 0));
  MS_RETURN_IF_ERROR(check_at_least(op, "t", t_len, 0));
  MS_RETURN_IF_ERROR(check_at_least(op, "heads", heads, 0));
  MS_RETURN_IF_ERROR(check_table(op, t));
  if (t_len > t.seq_len) {
    return InvalidArgument(std::string(op) + ": t is " + std::to_string(t_len) +
                           " but the rope table covers only " + std::to_string(t.seq_len) +
                           " positions");
  }
  const size_t tokens = elements(b, t_len);
  MS_RETURN_IF_ERROR(check_buffer(op, "x", x, tokens * elements(heads, 2 * t.half)));
  return launch_rope(x, t, nullptr, static_cast<int64_t>(tokens), t_len, heads, sign,
                     stream);
}

Status rope_positions(const char* op, float* x, const RopeTableView& t, const int64_t* positions,
                      int64_t n, int64_t heads, float sign, Stream stream) {
  MS_RETURN_IF_ERROR(check_at_least(op, "n", n, 0));
  MS_RETURN_IF_ERROR(check_at_least(op, "heads", heads, 0));
  MS_RETURN_IF_ERROR(check_table(op, t));
  MS_RETURN_IF_ERROR(check_buffer(op, "positions", positions, elements(n)));
  MS_RETURN_IF_ERROR(check_buffer(op, "x", x, elements(n, heads) * elements(2 * t.half)));
  return launch_rope(x, t, positions, n, 1, heads, sign, stream);
}

}  // namespace

Status swiglu_forward(const float* gate, const float* up, float* out, int64_t n,
                      Stream stream) {
  constexpr const char* kOp = "kernels::swiglu_forward";
  MS_RETURN_IF_ERROR(check_at_least(kOp, "n", n, 0));
  const size_t count = elements(n), bytes = count * sizeof(float);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "gate", gate, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "up", up, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "out", out, count));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "out", out, bytes, "gate", gate, bytes));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "out", out, bytes, "up", up, bytes));
  if (count == 0) return Status::OK();
  swiglu_forward_kernel<<<elementwise_grid(count), kBlockThreads, 0, cuda(stream)>>>(gate, up,
                                                                                     out, count);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status swiglu_backward(const float* gate, const float* up, const float* dout, float* dgate,
                       float* dup, int64_t n, Stream stream) {
  constexpr const char* kOp = "kernels::swiglu_backward";
  MS_RETURN_IF_ERROR(check_at_least(kOp, "n", n, 0));
  const size_t count = elements(n), bytes = count * sizeof(float);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "gate", gate, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "up", up, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dout", dout, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dgate", dgate, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dup", dup, count));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "dgate", dgate, bytes, "dup", dup, bytes));
  if (count == 0) return Status::OK();
  swiglu_backward_kernel<<<elementwise_grid(count), kBlockThreads, 0, cuda(stream)>>>(
      gate, up, dout, dgate, dup, count);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status softmax_forward(const float* x, float* p, int64_t n, int64_t e, Stream stream) {
  constexpr const char* kOp = "kernels::softmax_forward";
  MS_RETURN_IF_ERROR(check_rows(kOp, n, e, "e"));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "x", x, elements(n, e)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "p", p, elements(n, e)));
  MS_RETURN_IF_ERROR(check_same_or_disjoint(kOp, "p", p, "x", x, elements(n, e) * sizeof(float)));
  if (n == 0) return Status::OK();
  softmax_forward_kernel<<<warp_row_grid(n), kBlockThreads, 0, cuda(stream)>>>(x, p, n, e);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status softmax_backward(const float* p, const float* dp, float* dx, int64_t n, int64_t e,
                        Stream stream) {
  constexpr const char* kOp = "kernels::softmax_backward";
  MS_RETURN_IF_ERROR(check_rows(kOp, n, e, "e"));
  const size_t count = elements(n, e), bytes = count * sizeof(float);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "p", p, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dp", dp, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dx", dx, count));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "dx", dx, bytes, "p", p, bytes));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "dx", dx, bytes, "dp", dp, bytes));
  if (n == 0) return Status::OK();
  softmax_backward_kernel<<<warp_row_grid(n), kBlockThreads, 0, cuda(stream)>>>(p, dp, dx, n,
                                                                                e);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status rmsnorm_forward(const float* x, const float* weight, float* out, float* rstd, int64_t n,
                       int64_t d, float eps, Stream stream) {
  constexpr const char* kOp = "kernels::rmsnorm_forward";
  MS_RETURN_IF_ERROR(check_rows(kOp, n, d, "d"));
  const size_t count = elements(n, d), bytes = count * sizeof(float);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "x", x, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "weight", weight, elements(d)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "out", out, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "rstd", rstd, elements(n)));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "out", out, bytes, "x", x, bytes));
  if (n == 0) return Status::OK();
  rmsnorm_forward_kernel<<<row_grid(n), kBlockThreads, 0, cuda(stream)>>>(x, weight, out, rstd,
                                                                          n, d, eps);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

size_t rmsnorm_backward_scratch(int64_t n, int64_t d) {
  if (n <= 0 || d <= 0) return 0;
  return elements(dweight_chunks(n), d);
}

Status rmsnorm_backward(const float* x, const float* weight, const float* rstd,
                        const float* dout, float* dx, float* dweight, int64_t n, int64_t d,
                        float* scratch, Stream stream) {
  constexpr const char* kOp = "kernels::rmsnorm_backward";
  MS_RETURN_IF_ERROR(check_rows(kOp, n, d, "d"));
  const size_t count = elements(n, d), bytes = count * sizeof(float);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "x", x, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "weight", weight, elements(d)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "rstd", rstd, elements(n)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dout", dout, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dx", dx, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dweight", dweight, elements(d)));
  const size_t scratch_count = rmsnorm_backward_scratch(n, d);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "scratch", scratch, scratch_count));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "dx", dx, bytes, "dout", dout, bytes));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "dx", dx, bytes, "x", x, bytes));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "dweight", dweight, elements(d) * sizeof(float), "dx",
                                    dx, bytes));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "scratch", scratch, scratch_count * sizeof(float),
                                    "dweight", dweight, elements(d) * sizeof(float)));
  if (n == 0) return Status::OK();
  rmsnorm_backward_rows_kernel<<<row_grid(n), kBlockThreads, 0, cuda(stream)>>>(
      x, weight, rstd, dout, dx, n, d);
  MS_CUDA_CHECK(cudaGetLastError());
  const int64_t chunks = dweight_chunks(n);
  const int64_t rows_per_chunk = (n + chunks - 1) / chunks;
  const dim3 partial_grid(static_cast<unsigned>((d + kBlockThreads - 1) / kBlockThreads),
                          static_cast<unsigned>(chunks));
  rmsnorm_dweight_partials_kernel<<<partial_grid, kBlockThreads, 0, cuda(stream)>>>(
      x, rstd, dout, scratch, n, d, rows_per_chunk);
  MS_CUDA_CHECK(cudaGetLastError());
  rmsnorm_dweight_finish_kernel<<<elementwise_grid(elements(d)), kBlockThreads, 0,
                                  cuda(stream)>>>(scratch, chunks, dweight, d);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status rope_forward(float* x, const RopeTableView& t, int64_t b, int64_t t_len, int64_t heads,
                    Stream stream) {
  return rope_sequence("kernels::rope_forward", x, t, b, t_len, heads, 1.0f, stream);
}

Status rope_backward(float* dx, const RopeTableView& t, int64_t b, int64_t t_len,
                     int64_t heads, Stream stream) {
  return rope_sequence("kernels::rope_backward", dx, t, b, t_len, heads, -1.0f, stream);
}

Status rope_forward_at(float* x, const RopeTableView& t, const int64_t* positions, int64_t n,
                       int64_t heads, Stream stream) {
  return rope_positions("kernels::rope_forward_at", x, t, positions, n, heads, 1.0f, stream);
}

Status rope_backward_at(float* dx, const RopeTableView& t, const int64_t* positions, int64_t n,
                        int64_t heads, Stream stream) {
  return rope_positions("kernels::rope_backward_at", dx, t, positions, n, heads, -1.0f, stream);
}

}  // namespace ms::kernels
