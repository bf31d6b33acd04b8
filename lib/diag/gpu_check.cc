// The GPU benchmark of check; see gpu_check.h. CUDA code lives in kernels/ (linked into
// ms_diag when the build has CUDA); this file only chooses the device and names the metric.
#include "diag/gpu_check.h"

#include "core/logging.h"
#ifdef MS_HAVE_CUDA
#include "kernels/device.h"
#include "kernels/sgemm_rate.h"
#endif

namespace ms::diag {

#ifdef MS_HAVE_CUDA
std::map<std::string, double> gpu_rank_metrics(int rank, int n, int reps) {
  Result<int> count = kernels::device_count();
  if (!count.ok() || *count == 0) {
    MS_LOG(Debug) << "check: no GPU sgemm: "
                  << (count.ok() ? "no device" : count.status().message());
    return {};
  }
  // The node-local rank is not known here; world rank modulo the device count spreads ranks
  // over the GPUs the same way on uniform nodes.
  Status selected = kernels::set_device(rank % *count);
  Result<double> gflops =
      selected.ok() ? kernels::measure_sgemm_gflops(n, reps) : Result<double>(selected);
  if (!gflops.ok()) {
    MS_LOG(Warn) << "check: GPU sgemm failed: " << gflops.status().message();
    return {};
  }
  return {{"gpu_sgemm_gflops", *gflops}};
}
#else
std::map<std::string, double> gpu_rank_metrics(int, int, int) { return {}; }
#endif

}  // namespace ms::diag
