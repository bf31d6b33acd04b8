// Embedding gather and grouped scatter-add (ops/embedding.cc), softmax cross-entropy and the
// vocabulary-parallel pieces (ops/cross_entropy.cc). Row kernels give a row to one block; the
// row sums are fixed trees (kernels/row_reduce_device.h) in double where the CPU sums in
// double, and the gradient's products and differences go through __fmul_rn/__fsub_rn so nvcc
// cannot fuse them into an FMA the CPU twin does not perform.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/cuda_check.h"
#include "kernels/embedding_loss.cuh"
#include "kernels/launch.h"
#include "kernels/row_reduce_device.h"

namespace ms::kernels {
namespace {

// ---- Embedding ----

// One block per token row (grid-stride over rows), threads over columns: out[i] = the table
// row of ids[i] - first when that lies in [0, count), zeros otherwise.
__global__ void embedding_gather_kernel(const int32_t* ids, const float* table, float* out,
                                        int64_t n, int64_t d, int64_t first, int64_t count) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t local = static_cast<int64_t>(ids[i]) - first;
    const bool held = local >= 0 && local < count;
    const float* src = table + (held ? local : 0) * d;
    float* dst = out + i * d;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) dst[c] = held ? src[c] : 0.0f;
  }
}

// One block per group: dtable row rows[g] accumulates its tokens' dout rows in token order.
__global__ void embedding_backward_grouped_kernel(const int32_t* rows, const int64_t* starts,
                                                  const int64_t* tokens, int64_t groups,
                                                  const float* dout, float* dtable, int64_t d) {
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    float* row = dtable + static_cast<int64_t>(rows[g]) * d;
    const int64_t begin = starts[g], end = starts[g + 1];
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      float acc = row[c];
      for (int64_t k = begin; k < end; ++k) acc = __fadd_rn(acc, dout[tokens[k] * d + c]);
      row[c] = acc;
    }
  }
}

// ---- Row maxima and sums of exponentials ----

// The largest of row[0, real) (-inf for an empty row); every thread of the block gets it.
__device__ float block_row_max(const float* row, int64_t real) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) m = row_reduce::Max{}(m, row[j]);
  return row_reduce::block_fold(m, row_reduce::Max{});
}

// The sum over row[0, real) of exp(row[j] - m), each exp in float and the sum in double as on
// the CPU; every thread of the block gets it.
__device__ double block_row_exp_sum(const float* row, int64_t real, float m) {
  double sum = 0;
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) sum += expf(__fsub_rn(row[j], m));
  return row_reduce::block_fold(sum, row_reduce::Sum{});
}

__global__ void softmax_cross_entropy_kernel(float* logits, const int32_t* targets,
                                             float* losses, int64_t n, int64_t vocab,
                                             float grad_scale, bool write_grad) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    float* row = logits + i * vocab;
    const int64_t target = targets[i];
    const bool valid = target >= 0 && target < vocab;
    // Read before block_row_exp_sum's barriers, so before any thread overwrites the row.
    const float target_logit = valid ? row[target] : 0.0f;
    const float m = block_row_max(row, vocab);
    const double sum = block_row_exp_sum(row, vocab, m);
    const double lse = static_cast<double>(m) + log(sum);
    if (threadIdx.x == 0) {
      losses[i] = valid ? static_cast<float>(lse - static_cast<double>(target_logit)) : NAN;
    }
    if (!write_grad) continue;
    const float lse_f = static_cast<float>(lse);
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      float g = __fmul_rn(grad_scale, expf(__fsub_rn(row[j], lse_f)));
      if (j == target) g = __fsub_rn(g, grad_scale);
      row[j] = valid ? g : NAN;
    }
  }
}

__global__ void vocab_row_max_kernel(const float* logits, int64_t ld, int64_t real, float* max,
                                     int64_t n) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float m = block_row_max(logits + i * ld, real);
    if (threadIdx.x == 0) max[i] = m;
  }
}

__device__ bool holds(int64_t first, int64_t real, int64_t target) {
  return target >= first && target < first + real;
}

__global__ void vocab_local_sums_kernel(const float* logits, int64_t ld, int64_t real,
                                        int64_t first, const int32_t* targets,
                                        const float* max, float* pairs, int64_t n) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float* row = logits + i * ld;
    const double sum = block_row_exp_sum(row, real, max[i]);
    if (threadIdx.x == 0) {
      const int64_t target = targets[i];
      pairs[2 * i] = static_cast<float>(sum);
      pairs[2 * i + 1] = holds(first, real, target) ? row[target - first] : 0.0f;
    }
  }
}

__global__ void vocab_losses_kernel(const float* max, const float* pairs, float* lse,
                                    float* losses, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const double row_lse = static_cast<double>(max[i]) + log(static_cast<double>(pairs[2 * i]));
    lse[i] = static_cast<float>(row_lse);
    losses[i] = static_cast<float>(row_lse - static_cast<double>(pairs[2 * i + 1]));
  }
}

__global__ void vocab_local_grad_kernel(float* logits, int64_t ld, int64_t real, int64_t first,
                                        const int32_t* targets, const float* lse,
                                        float grad_scale, int64_t n) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    float* row = logits + i * ld;
    const float row_lse = lse[i];
    const int64_t target = targets[i];
    const int64_t held = holds(first, real, target) ? target - first : -1;
    for (int64_t j = threadIdx.x; j < ld; j += blockDim.x) {
      float g = 0.0f;
      if (j < real) {
        g = __fmul_rn(grad_scale, expf(__fsub_rn(row[j], row_lse)));
        if (j == held) g = __fsub_rn(g, grad_scale);
      }
      row[j] = g;
    }
  }
}

cudaStream_t cuda(Stream stream) { return static_cast<cudaStream_t>(stream); }
unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, kMaxElementwiseBlocks));
}

Status gather(const char* op, const int32_t* ids, const float* table, float* out, int64_t n,
              int64_t d, int64_t first, int64_t count, size_t table_rows, Stream stream) {
  MS_RETURN_IF_ERROR(check_at_least(op, "n", n, 0));
  MS_RETURN_IF_ERROR(check_at_least(op, "d", d, 0));
  MS_RETURN_IF_ERROR(check_buffer(op, "ids", ids, elements(n)));
  MS_RETURN_IF_ERROR(check_buffer(op, "table", table, table_rows * elements(d)));
  MS_RETURN_IF_ERROR(check_buffer(op, "out", out, elements(n, d)));
  if (n == 0 || d == 0) return Status::OK();
  embedding_gather_kernel<<<row_grid(n), kBlockThreads, 0, cuda(stream)>>>(ids, table, out, n, d,
                                                                           first, count);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

// n rows of ld columns, the first `real` of them this rank's: n >= 0 and 0 <= real <= ld.
Status check_vocab_rows(const char* op, const float* logits, int64_t ld, int64_t real,
                        int64_t n) {
  MS_RETURN_IF_ERROR(check_at_least(op, "n", n, 0));
  MS_RETURN_IF_ERROR(check_at_least(op, "real", real, 0));
  MS_RETURN_IF_ERROR(check_at_least(op, "ld", ld, real));
  return check_buffer(op, "logits", logits, elements(n, ld));
}

}  // namespace

Status embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n,
                         int64_t d, Stream stream) {
  // The vocabulary is unknown here: one table row is the least the gather can need.
  return gather("kernels::embedding_forward", ids, table, out, n, d, 0,
                std::numeric_limits<int64_t>::max(), n > 0 ? 1 : 0, stream);
}

Status embedding_forward_range(const int32_t* ids, const float* table, float* out, int64_t n,
                               int64_t d, int64_t first, int64_t count, Stream stream) {
  constexpr const char* kOp = "kernels::embedding_forward_range";
  MS_RETURN_IF_ERROR(check_at_least(kOp, "count", count, 0));
  return gather(kOp, ids, table, out, n, d, first, count, elements(count), stream);
}

Status embedding_backward_grouped(const int32_t* rows, const int64_t* starts,
                                  const int64_t* tokens, int64_t groups, const float* dout,
                                  float* dtable, int64_t d, Stream stream) {
  constexpr const char* kOp = "kernels::embedding_backward_grouped";
  MS_RETURN_IF_ERROR(check_at_least(kOp, "groups", groups, 0));
  MS_RETURN_IF_ERROR(check_at_least(kOp, "d", d, 0));
  // The token count lives on the device (starts[groups]); each group has at least one token
  // and one distinct dtable row, which is what the checks below can ask for.
  const size_t work = elements(groups, d), groups_if_work = work > 0 ? elements(groups) : 0;
  MS_RETURN_IF_ERROR(check_buffer(kOp, "rows", rows, groups_if_work));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "starts", starts, work > 0 ? elements(groups + 1) : 0));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "tokens", tokens, groups_if_work));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dout", dout, work));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dtable", dtable, work));
  if (work == 0) return Status::OK();
  embedding_backward_grouped_kernel<<<row_grid(groups), kBlockThreads, 0, cuda(stream)>>>(
      rows, starts, tokens, groups, dout, dtable, d);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status softmax_cross_entropy(float* logits, const int32_t* targets, float* losses, int64_t n,
                             int64_t vocab, float grad_scale, bool write_grad, Stream stream) {
  constexpr const char* kOp = "kernels::softmax_cross_entropy";
  MS_RETURN_IF_ERROR(check_at_least(kOp, "n", n, 0));
  MS_RETURN_IF_ERROR(check_at_least(kOp, "vocab", vocab, n > 0 ? 1 : 0));
  const size_t count = elements(n, vocab);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "logits", logits, count));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "targets", targets, elements(n)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "losses", losses, elements(n)));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "losses", losses, elements(n) * sizeof(float), "logits",
                                    logits, count * sizeof(float)));
  if (n == 0) return Status::OK();
  softmax_cross_entropy_kernel<<<row_grid(n), kBlockThreads, 0, cuda(stream)>>>(
      logits, targets, losses, n, vocab, grad_scale, write_grad);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status vocab_row_max(const float* logits, int64_t ld, int64_t real, float* max, int64_t n,
                     Stream stream) {
  constexpr const char* kOp = "kernels::vocab_row_max";
  MS_RETURN_IF_ERROR(check_vocab_rows(kOp, logits, ld, real, n));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "max", max, elements(n)));
  if (n == 0) return Status::OK();
  vocab_row_max_kernel<<<row_grid(n), kBlockThreads, 0, cuda(stream)>>>(logits, ld, real, max, n);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status vocab_local_sums(const float* logits, int64_t ld, int64_t real, int64_t first,
                        const int32_t* targets, const float* max, float* pairs, int64_t n,
                        Stream stream) {
  constexpr const char* kOp = "kernels::vocab_local_sums";
  MS_RETURN_IF_ERROR(check_vocab_rows(kOp, logits, ld, real, n));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "targets", targets, elements(n)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "max", max, elements(n)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "pairs", pairs, elements(2, n)));
  if (n == 0) return Status::OK();
  vocab_local_sums_kernel<<<row_grid(n), kBlockThreads, 0, cuda(stream)>>>(
      logits, ld, real, first, targets, max, pairs, n);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status vocab_losses(const float* max, const float* pairs, float* lse, float* losses, int64_t n,
                    Stream stream) {
  constexpr const char* kOp = "kernels::vocab_losses";
  MS_RETURN_IF_ERROR(check_at_least(kOp, "n", n, 0));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "max", max, elements(n)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "pairs", pairs, elements(2, n)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "lse", lse, elements(n)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "losses", losses, elements(n)));
  if (n == 0) return Status::OK();
  vocab_losses_kernel<<<blocks_for(elements(n), kMaxElementwiseBlocks), kBlockThreads, 0,
                        cuda(stream)>>>(max, pairs, lse, losses, n);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status vocab_local_grad(float* logits, int64_t ld, int64_t real, int64_t first,
                        const int32_t* targets, const float* lse, float grad_scale, int64_t n,
                        Stream stream) {
  constexpr const char* kOp = "kernels::vocab_local_grad";
  MS_RETURN_IF_ERROR(check_vocab_rows(kOp, logits, ld, real, n));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "targets", targets, elements(n)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "lse", lse, elements(n)));
  if (n == 0) return Status::OK();
  vocab_local_grad_kernel<<<row_grid(n), kBlockThreads, 0, cuda(stream)>>>(
      logits, ld, real, first, targets, lse, grad_scale, n);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

}  // namespace ms::kernels
