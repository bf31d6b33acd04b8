// One grid-stride kernel templated on a per-element conversion; the conversions use CUDA's
// round-to-nearest-even intrinsics on the bit containers of core/half.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cast.cuh"
#include "core/cuda_check.h"
#include "kernels/launch.h"

namespace ms::kernels {

namespace {

struct ToBf16 {
  __device__ bf16 operator()(float v) const {
    return bf16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
  }
};
struct FromBf16 {
  __device__ float operator()(bf16 v) const {
    return __uint_as_float(static_cast<unsigned>(v.bits) << 16);
  }
};
struct RoundBf16 {
  __device__ float operator()(float v) const { return __bfloat162float(__float2bfloat16_rn(v)); }
};
struct ToF16 {
  __device__ f16 operator()(float v) const { return f16{__half_as_ushort(__float2half_rn(v))}; }
};
struct FromF16 {
  __device__ float operator()(f16 v) const { return __half2float(__ushort_as_half(v.bits)); }
};

}  // namespace

template <typename In, typename Out, typename Convert>
static __global__ void convert_kernel(const In* x, Out* out, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = Convert{}(x[i]);
  }
}

// in_place: out may be x (an element-wise map of one type to itself); otherwise they must be
// disjoint.
template <typename Convert, typename In, typename Out>
static Status launch_convert(const char* op, const In* x, Out* out, size_t n, Stream stream,
                             bool in_place = false) {
  MS_RETURN_IF_ERROR(check_buffer(op, "x", x, n));
  MS_RETURN_IF_ERROR(check_buffer(op, "out", out, n));
  if (!(in_place && static_cast<const void*>(x) == static_cast<const void*>(out))) {
    MS_RETURN_IF_ERROR(check_disjoint(op, "x", x, n * sizeof(In), "out", out, n * sizeof(Out)));
  }
  if (n == 0) return Status::OK();
  convert_kernel<In, Out, Convert><<<blocks_for(n, kMaxElementwiseBlocks), kBlockThreads, 0,
                                     static_cast<cudaStream_t>(stream)>>>(x, out, n);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status f32_to_bf16(const float* x, bf16* out, size_t n, Stream stream) {
  return launch_convert<ToBf16>("kernels::f32_to_bf16", x, out, n, stream);
}

Status bf16_to_f32(const bf16* x, float* out, size_t n, Stream stream) {
  return launch_convert<FromBf16>("kernels::bf16_to_f32", x, out, n, stream);
}

Status round_to_bf16(const float* x, float* out, size_t n, Stream stream) {
  return launch_convert<RoundBf16>("kernels::round_to_bf16", x, out, n, stream, true);
}

Status f32_to_f16(const float* x, f16* out, size_t n, Stream stream) {
  return launch_convert<ToF16>("kernels::f32_to_f16", x, out, n, stream);
}

Status f16_to_f32(const f16* x, float* out, size_t n, Stream stream) {
  return launch_convert<FromF16>("kernels::f16_to_f32", x, out, n, stream);
}

}  // namespace ms::kernels
