// The GPU sgemm-rate probe; see sgemm_rate.h.
#include "kernels/sgemm_rate.h"

#include <algorithm>
#include <vector>

#include "core/timer.h"
#include "kernels/device.h"
#include "kernels/gemm.cuh"

namespace ms::kernels {

namespace {

// An n x n device matrix of ones (exact products, no denormals).
Result<DeviceBuffer> ones_matrix(int64_t n) {
  const size_t bytes = static_cast<size_t>(n * n) * sizeof(float);
  MS_ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::allocate(bytes));
  const std::vector<float> ones(static_cast<size_t>(n * n), 1.0f);
  MS_RETURN_IF_ERROR(copy_to_device(buffer.data(), ones.data(), bytes));
  return buffer;
}

}  // namespace

Result<double> measure_sgemm_gflops(int64_t n, int reps) {
  MS_ASSIGN_OR_RETURN(DeviceBuffer a, ones_matrix(n));
  MS_ASSIGN_OR_RETURN(DeviceBuffer b, ones_matrix(n));
  MS_ASSIGN_OR_RETURN(DeviceBuffer c,
                      DeviceBuffer::allocate(static_cast<size_t>(n * n) * sizeof(float)));
  double best_s = 1e30;
  for (int rep = 0; rep <= std::max(reps, 1); ++rep) {  // rep 0 warms cuBLASLt up
    Stopwatch watch;
    MS_RETURN_IF_ERROR(kernels::sgemm(Transpose::kNo, Transpose::kNo, n, n, n, 1.0f,
                                      a.as<float>(), n, b.as<float>(), n, 0.0f, c.as<float>(), n));
    MS_RETURN_IF_ERROR(synchronize(nullptr));
    if (rep > 0) best_s = std::min(best_s, watch.elapsed_s());
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best_s /
         1e9;
}

}  // namespace ms::kernels
