// The GPU sgemm-rate probe; see sgemm_rate.h.
#include "kernels/sgemm_rate.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/cuda_check.h"

#include "core/timer.h"
#include "kernels/device.h"
#include "kernels/gemm.cuh"

namespace ms::kernels {

namespace {

template <typename T>
T one() {
  if constexpr (std::is_same_v<T, bf16>) {
    return bf16{float_to_bf16(1.0f)};
  } else {
    return 1.0f;
  }
}

// An n x n device matrix of ones (exact products, no denormals), of float or bf16.
template <typename T>
Result<DeviceBuffer> ones_matrix(int64_t n) {
  const size_t bytes = static_cast<size_t>(n * n) * sizeof(T);
  MS_ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::allocate(bytes));
  const std::vector<T> ones(static_cast<size_t>(n * n), one<T>());
  MS_RETURN_IF_ERROR(copy_to_device(buffer.data(), ones.data(), bytes));
  return buffer;
}

// Best GFLOP/s of gemm(a, b, c) (n x n x n) over `reps`, after one untimed run.
template <typename Input, typename Gemm>
Result<double> measure_gemm(int64_t n, int reps, Gemm gemm) {
  if (n <= 0) return InvalidArgument("GEMM rate: n must be positive, got " + std::to_string(n));
  MS_ASSIGN_OR_RETURN(DeviceBuffer a, ones_matrix<Input>(n));
  MS_ASSIGN_OR_RETURN(DeviceBuffer b, ones_matrix<Input>(n));
  MS_ASSIGN_OR_RETURN(DeviceBuffer c,
                      DeviceBuffer::allocate(static_cast<size_t>(n * n) * sizeof(float)));
  double best_s = 1e30;
  for (int rep = 0; rep <= std::max(reps, 1); ++rep) {  // rep 0 warms cuBLASLt up
    Stopwatch watch;
    MS_RETURN_IF_ERROR(gemm(a.as<Input>(), b.as<Input>(), c.as<float>()));
    MS_RETURN_IF_ERROR(synchronize(nullptr));
    if (rep > 0) best_s = std::min(best_s, watch.elapsed_s());
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best_s /
         1e9;
}

}  // namespace

Result<double> measure_sgemm_gflops(int64_t n, int reps) {
  return measure_gemm<float>(n, reps, [n](const float* a, const float* b, float* c) {
    return kernels::sgemm(Transpose::kNo, Transpose::kNo, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  });
}

Result<double> measure_gemm_bf16_gflops(int64_t n, int reps) {
  return measure_gemm<bf16>(n, reps, [n](const bf16* a, const bf16* b, float* c) {
    return kernels::gemm_bf16(Transpose::kNo, Transpose::kNo, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                              n);
  });
}

double peak_flops_per_sm_clock(int compute_major, int compute_minor, GemmPrecision precision) {
  const bool bf16 = precision == GemmPrecision::kBf16;
  if (compute_major == 8 && compute_minor == 0) return bf16 ? 2048 : 128;
  if (compute_major == 9 && compute_minor == 0) return bf16 ? 4096 : 256;
  return 0;
}

Result<double> device_peak_gflops(GemmPrecision precision) {
  MS_ASSIGN_OR_RETURN(const int count, device_count());
  (void)count;
  int device = 0, major = 0, minor = 0, sms = 0, clock_khz = 0;
  MS_CUDA_CHECK(cudaGetDevice(&device));
  MS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MS_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  MS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  MS_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  return sms * peak_flops_per_sm_clock(major, minor, precision) * clock_khz * 1e3 / 1e9;
}

}  // namespace ms::kernels
