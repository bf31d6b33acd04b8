// MoE kernels along a host-built routing (see moe.cuh). Row ops take one warp per row, a lane
// per column, and walk a token's k slots in order, like the CPU; the unpermute backward takes
// one warp per (token, slot), its dot product summed by the warp's fixed shuffle tree; sums
// over tokens are a column reduction with per-chunk partials and one ordered pass. All fp32
// arithmetic that should match the CPU bit for bit is spelled with __f*_rn so nvcc cannot
// contract it into FMAs.
#include <cuda_runtime.h>

#include <string>

#include "core/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/moe.cuh"
#include "kernels/optimizer.cuh"

namespace ms::kernels {
namespace {

constexpr unsigned kWarpSize = 32;
constexpr unsigned kWarpsPerBlock = kBlockThreads / kWarpSize;
// The probability sums' blocks: kSumColumns experts side by side (coalesced loads along a row)
// times kSumLanes rows folded at a time.
constexpr unsigned kSumColumns = 32;
constexpr unsigned kSumLanes = kBlockThreads / kSumColumns;
// Token chunks (one partial per chunk and expert): about kRowsPerChunk rows each, at most
// kMaxChunks, so the ordered second pass stays short.
constexpr int64_t kRowsPerChunk = 256;
constexpr int64_t kMaxChunks = 128;

__device__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }
__device__ int64_t first_warp() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
}
__device__ int64_t warp_stride() { return static_cast<int64_t>(gridDim.x) * kWarpsPerBlock; }

__device__ float warp_sum(float v) {
  for (unsigned offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}
__device__ double warp_sum(double v) {
  for (unsigned offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = __dadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}
__device__ float warp_max(float v) {
  for (unsigned offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// One thread per token: the sums over its slots, then its k entries of dprobs (distinct
// experts, so no two threads share an output).
__global__ void route_backward_kernel(const float* probs, const float* weights,
                                      const int32_t* expert, int64_t n, int64_t e, int64_t k,
                                      const float* dweights, float* dprobs) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int32_t* chosen = expert + i * k;
    float sum = 0.0f, dot = 0.0f;
    for (int64_t s = 0; s < k; ++s) {
      sum = __fadd_rn(sum, probs[i * e + chosen[s]]);
      dot = __fadd_rn(dot, __fmul_rn(dweights[i * k + s], weights[i * k + s]));
    }
    for (int64_t s = 0; s < k; ++s) {
      float& out = dprobs[i * e + chosen[s]];
      out = __fadd_rn(out, __fdiv_rn(__fsub_rn(dweights[i * k + s], dot), sum));
    }
  }
}

// The row ops below take one warp per row (lanes stride over the d columns, so loads along a
// row are coalesced and no element index is divided by d).
__global__ void permute_forward_kernel(const float* x, const int64_t* token_of_row, int64_t rows,
                                       int64_t d, float* xp) {
  const unsigned lane = threadIdx.x % kWarpSize;
  for (int64_t row = first_warp(); row < rows; row += warp_stride()) {
    const float* src = x + token_of_row[row] * d;
    float* dst = xp + row * d;
    for (int64_t c = lane; c < d; c += kWarpSize) dst[c] = src[c];
  }
}

__global__ void permute_backward_kernel(const float* dxp, const int64_t* row_of, int64_t n,
                                        int64_t k, int64_t d, float* dx) {
  const unsigned lane = threadIdx.x % kWarpSize;
  for (int64_t token = first_warp(); token < n; token += warp_stride()) {
    const int64_t* rows = row_of + token * k;
    float* out = dx + token * d;
    for (int64_t c = lane; c < d; c += kWarpSize) {
      float acc = out[c];
      for (int64_t s = 0; s < k; ++s) {
        if (rows[s] >= 0) acc = __fadd_rn(acc, dxp[rows[s] * d + c]);
      }
      out[c] = acc;
    }
  }
}

__global__ void unpermute_forward_kernel(const float* yp, const float* weights,
                                         const int64_t* row_of, int64_t n, int64_t k, int64_t d,
                                         float* y) {
  const unsigned lane = threadIdx.x % kWarpSize;
  for (int64_t token = first_warp(); token < n; token += warp_stride()) {
    const int64_t* rows = row_of + token * k;
    const float* w = weights + token * k;
    float* out = y + token * d;
    for (int64_t c = lane; c < d; c += kWarpSize) {
      float acc = 0.0f;
      for (int64_t s = 0; s < k; ++s) {
        if (rows[s] >= 0) acc = __fadd_rn(acc, __fmul_rn(w[s], yp[rows[s] * d + c]));
      }
      out[c] = acc;
    }
  }
}

// One warp per (token, slot): the row's dyp update (each row belongs to one assignment, so no
// two warps share it) and the dot product for dweights, summed by the warp's fixed tree.
__global__ void unpermute_backward_kernel(const float* yp, const float* weights,
                                          const int64_t* row_of, int64_t n, int64_t k, int64_t d,
                                          const float* dy, float* dyp, float* dweights) {
  const unsigned lane = threadIdx.x % kWarpSize;
  for (int64_t a = first_warp(); a < n * k; a += warp_stride()) {
    const int64_t row = row_of[a];
    if (row < 0) continue;  // the same for every lane of the warp
    const float w = weights[a];
    const float* g = dy + (a / k) * d;
    const float* y_row = yp + row * d;
    float* dy_row = dyp + row * d;
    float dot = 0.0f;
    for (int64_t c = lane; c < d; c += kWarpSize) {
      dy_row[c] = __fadd_rn(dy_row[c], __fmul_rn(w, g[c]));
      dot = __fadd_rn(dot, __fmul_rn(g[c], y_row[c]));
    }
    dot = warp_sum(dot);
    if (lane == 0) dweights[a] = __fadd_rn(dweights[a], dot);
  }
}

// Block (x, y) sums experts [32x, 32x + 32) over the token chunk y, each thread a strided
// subset of the chunk's rows, then the kSumLanes partial sums in order; writes
// partials[y * e + j].
__global__ void probability_sums_kernel(const float* probs, int64_t n, int64_t e,
                                        int64_t chunk_rows, double* partials) {
  __shared__ double lane_sums[kSumLanes][kSumColumns];
  const unsigned column = threadIdx.x % kSumColumns, lane = threadIdx.x / kSumColumns;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kSumColumns + column;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t last = first + chunk_rows < n ? first + chunk_rows : n;
  double acc = 0;
  if (j < e) {
    for (int64_t i = first + lane; i < last; i += kSumLanes) {
      acc = __dadd_rn(acc, static_cast<double>(probs[i * e + j]));
    }
  }
  lane_sums[lane][column] = acc;
  __syncthreads();
  if (lane == 0 && j < e) {
    double total = lane_sums[0][column];
    for (unsigned l = 1; l < kSumLanes; ++l) total = __dadd_rn(total, lane_sums[l][column]);
    partials[static_cast<int64_t>(blockIdx.y) * e + j] = total;
  }
}

// sums[j] = partials[0 * e + j] + partials[1 * e + j] + ... over `chunks`, in chunk order.
__global__ void sum_chunks_kernel(const double* partials, int64_t chunks, int64_t e,
                                  double* sums) {
  for (int64_t j = first_index(); j < e; j += grid_stride()) {
    double total = 0;
    for (int64_t c = 0; c < chunks; ++c) total = __dadd_rn(total, partials[c * e + j]);
    sums[j] = total;
  }
}

// One thread: the loss from the per-expert probability sums, in the CPU's order and precision.
__global__ void aux_loss_kernel(const double* prob_sums, const int64_t* routed, int64_t n,
                                int64_t e, int64_t k, double* out) {
  const double tokens = static_cast<double>(n);
  const double assignments = __dmul_rn(tokens, static_cast<double>(k));
  double loss = 0;
  for (int64_t j = 0; j < e; ++j) {
    const double f = __ddiv_rn(static_cast<double>(routed[j]), assignments);
    loss = __dadd_rn(loss, __dmul_rn(f, __ddiv_rn(prob_sums[j], tokens)));
  }
  *out = __dmul_rn(static_cast<double>(e), loss);
}

// The CPU computes (daux * e) in float (float times int64), then * f / n in double.
__global__ void aux_loss_backward_kernel(const int64_t* routed, float daux, int64_t n, int64_t e,
                                         int64_t k, float* dprobs) {
  const double tokens = static_cast<double>(n);
  const double assignments = __dmul_rn(tokens, static_cast<double>(k));
  const float scaled = __fmul_rn(daux, __ll2float_rn(e));
  const int64_t total = n * e;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const double f = __ddiv_rn(static_cast<double>(routed[i % e]), assignments);
    const float grad = __double2float_rn(__ddiv_rn(__dmul_rn(scaled, f), tokens));
    dprobs[i] = __fadd_rn(dprobs[i], grad);
  }
}

// One warp per token: lse = max + log(sum exp(l - max)), the exponentials in double as on the
// CPU (l - max rounded in fp32 first, as there).
__global__ void logsumexp_kernel(const float* logits, int64_t n, int64_t e, float* lse) {
  const unsigned lane = threadIdx.x % kWarpSize;
  for (int64_t i = first_warp(); i < n; i += warp_stride()) {
    const float* row = logits + i * e;
    float mx = -INFINITY;
    for (int64_t j = lane; j < e; j += kWarpSize) mx = fmaxf(mx, row[j]);
    mx = warp_max(mx);
    double sum = 0;
    for (int64_t j = lane; j < e; j += kWarpSize) {
      sum = __dadd_rn(sum, exp(static_cast<double>(__fsub_rn(row[j], mx))));
    }
    sum = warp_sum(sum);
    if (lane == 0) lse[i] = __double2float_rn(__dadd_rn(static_cast<double>(mx), log(sum)));
  }
}

__global__ void z_loss_backward_kernel(const float* probs, const float* lse, float scale,
                                       int64_t n, int64_t e, float* dlogits) {
  const int64_t total = n * e;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const float g = __fmul_rn(scale, lse[i / e]);
    dlogits[i] = __fadd_rn(dlogits[i], __fmul_rn(g, probs[i]));
  }
}

std::string describe(const MoeRoutingView& r) {
  return "tokens=" + std::to_string(r.tokens) + " experts=" + std::to_string(r.experts) +
         " top_k=" + std::to_string(r.top_k) + " rows=" + std::to_string(r.rows);
}

// The routing's sizes (1 <= k <= e, 0 <= rows <= n * k) and its five arrays.
Status check_routing(const char* op, const MoeRoutingView& r) {
  if (r.tokens < 0 || r.experts < 1 || r.top_k < 1 || r.top_k > r.experts || r.rows < 0 ||
      r.rows > r.tokens * r.top_k) {
    return InvalidArgument(std::string(op) + ": routing sizes out of range (" + describe(r) +
                           "; need tokens >= 0, 1 <= top_k <= experts, 0 <= rows <= tokens * "
                           "top_k)");
  }
  const auto assignments = static_cast<size_t>(r.tokens * r.top_k);
  MS_RETURN_IF_ERROR(check_buffer(op, "r.expert", r.expert, assignments));
  MS_RETURN_IF_ERROR(check_buffer(op, "r.offsets", r.offsets, static_cast<size_t>(r.experts + 1)));
  MS_RETURN_IF_ERROR(check_buffer(op, "r.row_of", r.row_of, assignments));
  MS_RETURN_IF_ERROR(check_buffer(op, "r.token_of_row", r.token_of_row,
                                  static_cast<size_t>(r.rows)));
  return check_buffer(op, "r.routed", r.routed, static_cast<size_t>(r.experts));
}

Status check_floats(const char* op, const char* name, const float* p, int64_t count) {
  return check_buffer(op, name, p, static_cast<size_t>(count));
}

// InvalidArgument when the output `out` (out_count floats) overlaps the input `in`.
Status check_apart(const char* op, const char* out_name, const float* out, int64_t out_count,
                   const char* in_name, const float* in, int64_t in_count) {
  return check_disjoint(op, out_name, out, static_cast<size_t>(out_count) * sizeof(float),
                        in_name, in, static_cast<size_t>(in_count) * sizeof(float));
}

unsigned grid_for(int64_t threads) {
  return blocks_for(static_cast<size_t>(threads), kMaxElementwiseBlocks);
}
// Blocks for one warp per item.
unsigned warp_grid_for(int64_t items) {
  return grid_for(items * static_cast<int64_t>(kWarpSize));
}

// The probability sums into `sums` (e doubles): one pass when the tokens fit one chunk, else
// per-chunk partials in a stream-ordered workspace and an ordered pass over them.
Status launch_probability_sums(const float* probs, int64_t n, int64_t e, double* sums,
                               cudaStream_t stream) {
  int64_t chunks = (n + kRowsPerChunk - 1) / kRowsPerChunk;
  chunks = chunks < 1 ? 1 : (chunks > kMaxChunks ? kMaxChunks : chunks);
  const int64_t chunk_rows = (n + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>((e + kSumColumns - 1) / kSumColumns),
                  static_cast<unsigned>(chunks));
  if (chunks == 1) {
    probability_sums_kernel<<<grid, kBlockThreads, 0, stream>>>(probs, n, e, chunk_rows, sums);
    MS_CUDA_CHECK(cudaGetLastError());
    return Status::OK();
  }
  void* workspace = nullptr;
  MS_CUDA_CHECK(cudaMallocAsync(&workspace, sizeof(double) * chunks * e, stream));
  auto* partials = static_cast<double*>(workspace);
  probability_sums_kernel<<<grid, kBlockThreads, 0, stream>>>(probs, n, e, chunk_rows, partials);
  cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) {
    sum_chunks_kernel<<<grid_for(e), kBlockThreads, 0, stream>>>(partials, chunks, e, sums);
    launched = cudaGetLastError();
  }
  MS_CUDA_CHECK(cudaFreeAsync(workspace, stream));
  MS_CUDA_CHECK(launched);
  return Status::OK();
}

}  // namespace

Status moe_route_backward(const float* probs, const float* weights, const MoeRoutingView& r,
                          const float* dweights, float* dprobs, Stream stream) {
  constexpr const char* kOp = "kernels::moe_route_backward";
  MS_RETURN_IF_ERROR(check_routing(kOp, r));
  const int64_t ne = r.tokens * r.experts, nk = r.tokens * r.top_k;
  MS_RETURN_IF_ERROR(check_floats(kOp, "probs", probs, ne));
  MS_RETURN_IF_ERROR(check_floats(kOp, "weights", weights, nk));
  MS_RETURN_IF_ERROR(check_floats(kOp, "dweights", dweights, nk));
  MS_RETURN_IF_ERROR(check_floats(kOp, "dprobs", dprobs, ne));
  MS_RETURN_IF_ERROR(check_apart(kOp, "dprobs", dprobs, ne, "probs", probs, ne));
  if (r.tokens == 0) return Status::OK();
  route_backward_kernel<<<grid_for(r.tokens), kBlockThreads, 0,
                          static_cast<cudaStream_t>(stream)>>>(
      probs, weights, r.expert, r.tokens, r.experts, r.top_k, dweights, dprobs);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status moe_permute_forward(const float* x, const MoeRoutingView& r, float* xp, int64_t d,
                           Stream stream) {
  constexpr const char* kOp = "kernels::moe_permute_forward";
  MS_RETURN_IF_ERROR(check_routing(kOp, r));
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "d", d));
  MS_RETURN_IF_ERROR(check_floats(kOp, "x", x, r.tokens * d));
  MS_RETURN_IF_ERROR(check_floats(kOp, "xp", xp, r.rows * d));
  MS_RETURN_IF_ERROR(check_apart(kOp, "xp", xp, r.rows * d, "x", x, r.tokens * d));
  if (r.rows * d == 0) return Status::OK();
  permute_forward_kernel<<<warp_grid_for(r.rows), kBlockThreads, 0,
                           static_cast<cudaStream_t>(stream)>>>(x, r.token_of_row, r.rows, d, xp);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status moe_permute_backward(const float* dxp, const MoeRoutingView& r, float* dx, int64_t d,
                            Stream stream) {
  constexpr const char* kOp = "kernels::moe_permute_backward";
  MS_RETURN_IF_ERROR(check_routing(kOp, r));
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "d", d));
  MS_RETURN_IF_ERROR(check_floats(kOp, "dxp", dxp, r.rows * d));
  MS_RETURN_IF_ERROR(check_floats(kOp, "dx", dx, r.tokens * d));
  MS_RETURN_IF_ERROR(check_apart(kOp, "dx", dx, r.tokens * d, "dxp", dxp, r.rows * d));
  if (r.tokens * d == 0) return Status::OK();
  permute_backward_kernel<<<warp_grid_for(r.tokens), kBlockThreads, 0,
                            static_cast<cudaStream_t>(stream)>>>(dxp, r.row_of, r.tokens,
                                                                 r.top_k, d, dx);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status moe_unpermute_forward(const float* yp, const float* weights, const MoeRoutingView& r,
                             float* y, int64_t d, Stream stream) {
  constexpr const char* kOp = "kernels::moe_unpermute_forward";
  MS_RETURN_IF_ERROR(check_routing(kOp, r));
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "d", d));
  const int64_t nk = r.tokens * r.top_k;
  MS_RETURN_IF_ERROR(check_floats(kOp, "yp", yp, r.rows * d));
  MS_RETURN_IF_ERROR(check_floats(kOp, "weights", weights, nk));
  MS_RETURN_IF_ERROR(check_floats(kOp, "y", y, r.tokens * d));
  MS_RETURN_IF_ERROR(check_apart(kOp, "y", y, r.tokens * d, "yp", yp, r.rows * d));
  MS_RETURN_IF_ERROR(check_apart(kOp, "y", y, r.tokens * d, "weights", weights, nk));
  if (r.tokens * d == 0) return Status::OK();
  unpermute_forward_kernel<<<warp_grid_for(r.tokens), kBlockThreads, 0,
                             static_cast<cudaStream_t>(stream)>>>(yp, weights, r.row_of,
                                                                  r.tokens, r.top_k, d, y);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status moe_unpermute_backward(const float* yp, const float* weights, const MoeRoutingView& r,
                              const float* dy, float* dyp, float* dweights, int64_t d,
                              Stream stream) {
  constexpr const char* kOp = "kernels::moe_unpermute_backward";
  MS_RETURN_IF_ERROR(check_routing(kOp, r));
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "d", d));
  const int64_t nk = r.tokens * r.top_k, rd = r.rows * d, nd = r.tokens * d;
  MS_RETURN_IF_ERROR(check_floats(kOp, "yp", yp, rd));
  MS_RETURN_IF_ERROR(check_floats(kOp, "weights", weights, nk));
  MS_RETURN_IF_ERROR(check_floats(kOp, "dy", dy, nd));
  MS_RETURN_IF_ERROR(check_floats(kOp, "dyp", dyp, rd));
  MS_RETURN_IF_ERROR(check_floats(kOp, "dweights", dweights, nk));
  MS_RETURN_IF_ERROR(check_apart(kOp, "dyp", dyp, rd, "yp", yp, rd));
  MS_RETURN_IF_ERROR(check_apart(kOp, "dyp", dyp, rd, "dy", dy, nd));
  MS_RETURN_IF_ERROR(check_apart(kOp, "dyp", dyp, rd, "dweights", dweights, nk));
  MS_RETURN_IF_ERROR(check_apart(kOp, "dweights", dweights, nk, "weights", weights, nk));
  MS_RETURN_IF_ERROR(check_apart(kOp, "dweights", dweights, nk, "yp", yp, rd));
  MS_RETURN_IF_ERROR(check_apart(kOp, "dweights", dweights, nk, "dy", dy, nd));
  if (nk == 0) return Status::OK();
  unpermute_backward_kernel<<<warp_grid_for(nk), kBlockThreads, 0,
                              static_cast<cudaStream_t>(stream)>>>(
      yp, weights, r.row_of, r.tokens, r.top_k, d, dy, dyp, dweights);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status moe_aux_loss(const float* probs, const MoeRoutingView& r, double* out, Stream stream) {
  constexpr const char* kOp = "kernels::moe_aux_loss";
  MS_RETURN_IF_ERROR(check_routing(kOp, r));
  MS_RETURN_IF_ERROR(check_floats(kOp, "probs", probs, r.tokens * r.experts));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "out", out, 1));
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  void* workspace = nullptr;
  MS_CUDA_CHECK(cudaMallocAsync(&workspace, sizeof(double) * r.experts, cuda_stream));
  auto* prob_sums = static_cast<double*>(workspace);
  Status launched = launch_probability_sums(probs, r.tokens, r.experts, prob_sums, cuda_stream);
  if (launched.ok()) {
    aux_loss_kernel<<<1, 1, 0, cuda_stream>>>(prob_sums, r.routed, r.tokens, r.experts, r.top_k,
                                              out);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) launched = cuda_error(err, "aux_loss_kernel", __FILE__, __LINE__);
  }
  MS_CUDA_CHECK(cudaFreeAsync(workspace, cuda_stream));
  return launched;
}

Status moe_aux_loss_backward(const MoeRoutingView& r, float daux, float* dprobs, Stream stream) {
  constexpr const char* kOp = "kernels::moe_aux_loss_backward";
  MS_RETURN_IF_ERROR(check_routing(kOp, r));
  const int64_t ne = r.tokens * r.experts;
  MS_RETURN_IF_ERROR(check_floats(kOp, "dprobs", dprobs, ne));
  if (ne == 0) return Status::OK();
  aux_loss_backward_kernel<<<grid_for(ne), kBlockThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      r.routed, daux, r.tokens, r.experts, r.top_k, dprobs);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status moe_probability_sums(const float* probs, int64_t n, int64_t e, double* sums,
                            Stream stream) {
  constexpr const char* kOp = "kernels::moe_probability_sums";
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "n", n));
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "e", e));
  MS_RETURN_IF_ERROR(check_floats(kOp, "probs", probs, n * e));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "sums", sums, static_cast<size_t>(e)));
  if (e == 0) return Status::OK();  // no sums to write; n == 0 still writes e zeros
  return launch_probability_sums(probs, n, e, sums, static_cast<cudaStream_t>(stream));
}

Status moe_z_loss(const float* logits, float* lse, int64_t n, int64_t e, double* out,
                  Stream stream) {
  constexpr const char* kOp = "kernels::moe_z_loss";
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "n", n));
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "e", e));
  if (n > 0 && e == 0) {
    return InvalidArgument(std::string(kOp) + ": e is 0 but " + std::to_string(n) +
                           " tokens need a logsumexp over at least one logit");
  }
  MS_RETURN_IF_ERROR(check_floats(kOp, "logits", logits, n * e));
  MS_RETURN_IF_ERROR(check_floats(kOp, "lse", lse, n));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "out", out, 1));
  MS_RETURN_IF_ERROR(check_apart(kOp, "lse", lse, n, "logits", logits, n * e));
  if (n > 0) {
    logsumexp_kernel<<<warp_grid_for(n), kBlockThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        logits, n, e, lse);
    MS_CUDA_CHECK(cudaGetLastError());
  }
  // The squares of fp32 values are exact in double, so this is the CPU's sum up to its order.
  return sum_of_squares_f64(lse, n, out, stream);
}

Status moe_z_loss_backward(const float* probs, const float* lse, float scale, float* dlogits,
                           int64_t n, int64_t e, Stream stream) {
  constexpr const char* kOp = "kernels::moe_z_loss_backward";
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "n", n));
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "e", e));
  MS_RETURN_IF_ERROR(check_floats(kOp, "probs", probs, n * e));
  MS_RETURN_IF_ERROR(check_floats(kOp, "lse", lse, n));
  MS_RETURN_IF_ERROR(check_floats(kOp, "dlogits", dlogits, n * e));
  MS_RETURN_IF_ERROR(check_apart(kOp, "dlogits", dlogits, n * e, "probs", probs, n * e));
  if (n * e == 0) return Status::OK();
  z_loss_backward_kernel<<<grid_for(n * e), kBlockThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      probs, lse, scale, n, e, dlogits);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

}  // namespace ms::kernels
