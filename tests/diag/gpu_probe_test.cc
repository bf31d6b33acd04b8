// check's GPU probes (lib/diag/gpu_check.h over kernels/sgemm_rate.h and
// kernels/bandwidth_rate.h). The peak table and argument checks run everywhere; the probes
// themselves run where a GPU is visible and are skipped with the runtime's reason elsewhere,
// where gpu_rank_metrics must give nothing (a CPU node is no suspect for lacking a GPU).
#include <gtest/gtest.h>

#include "diag/gpu_check.h"
#include "kernels/bandwidth_rate.h"
#include "kernels/device.h"
#include "kernels/sgemm_rate.h"

namespace ms::diag {
namespace {

using kernels::GemmPrecision;

TEST(GpuPeak, PerSmRatesReproduceTheWhitepaperPeaks) {
  // A100 SXM: 108 SMs at 1410 MHz give 312 TFLOP/s bf16 dense and 19.5 fp32.
  EXPECT_NEAR(108 * kernels::peak_flops_per_sm_clock(8, 0, GemmPrecision::kBf16) * 1.41e9 / 1e12,
              312, 0.5);
  EXPECT_NEAR(108 * kernels::peak_flops_per_sm_clock(8, 0, GemmPrecision::kF32) * 1.41e9 / 1e12,
              19.5, 0.05);
  // H100 SXM: 132 SMs, 989.4 TFLOP/s bf16 dense at 1830 MHz, 66.9 fp32 at 1980 MHz.
  EXPECT_NEAR(132 * kernels::peak_flops_per_sm_clock(9, 0, GemmPrecision::kBf16) * 1.83e9 / 1e12,
              989.4, 0.5);
  EXPECT_NEAR(132 * kernels::peak_flops_per_sm_clock(9, 0, GemmPrecision::kF32) * 1.98e9 / 1e12,
              66.9, 0.05);
  // Unknown architectures have no peak rather than a guessed one.
  EXPECT_EQ(kernels::peak_flops_per_sm_clock(8, 6, GemmPrecision::kBf16), 0);
  EXPECT_EQ(kernels::peak_flops_per_sm_clock(12, 0, GemmPrecision::kF32), 0);
}

TEST(GpuProbes, BadSizesAreRefusedBeforeTheGpuIsTouched) {
  EXPECT_EQ(kernels::measure_sgemm_gflops(0, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels::measure_gemm_bf16_gflops(-4, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels::measure_device_read_gbs(3, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels::measure_device_copy_gbs(0, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels::measure_host_to_device_gbs(2, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels::measure_device_to_host_gbs(1, 1).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(GpuProbes, EveryProbeGivesItsMetricOnAGpuAndNothingWithoutOne) {
  const GpuProbeSizes sizes{512, 1024, 16u << 20};
  const std::map<std::string, double> metrics = gpu_rank_metrics(0, sizes, 2);
  Result<int> count = kernels::device_count();
  if (!count.ok()) {
    EXPECT_TRUE(metrics.empty());
    GTEST_SKIP() << "no GPU: " << count.status().message();
  }
  for (const char* name : {"gpu_sgemm_gflops", "gpu_bf16_gemm_gflops", "gpu_read_gbs",
                           "gpu_copy_gbs", "gpu_h2d_gbs", "gpu_d2h_gbs"}) {
    ASSERT_TRUE(metrics.count(name)) << name;
    EXPECT_GT(metrics.at(name), 0) << name;
  }
  Result<double> peak = kernels::device_peak_gflops(GemmPrecision::kBf16);
  ASSERT_TRUE(peak.ok()) << peak.status().message();
  EXPECT_EQ(metrics.count("gpu_bf16_gemm_peak_pct"), *peak > 0 ? 1u : 0u);
  // Zero sizes skip every probe.
  EXPECT_TRUE(gpu_rank_metrics(0, GpuProbeSizes{0, 0, 0}, 1).empty());
}

}  // namespace
}  // namespace ms::diag
