// Nvml (diag/nvml.h) against a missing library and against tests/diag/fake_nvml.cc, a shared
// library exporting NVML's entry points: the dlopen/dlsym path, each field's query, a query
// refused for permission, entry points the driver lacks, and a lost GPU among healthy ones.
#include "diag/nvml.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "diag/gpu_health.h"

namespace ms::diag {
namespace {

bool unread_has(const GpuReading& r, const std::string& prefix) {
  return std::any_of(r.unread.begin(), r.unread.end(),
                     [&](const std::string& u) { return u.rfind(prefix, 0) == 0; });
}

TEST(Nvml, MissingLibraryIsANamedSkipNotACrash) {
  Result<std::unique_ptr<Nvml>> nvml = Nvml::open("libnvidia-ml-absent.so.1");
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(nvml.status().message().rfind("NVML not available: ", 0), 0u)
      << nvml.status().message();
  EXPECT_NE(nvml.status().message().find("libnvidia-ml-absent.so.1"), std::string::npos);
  Result<std::vector<GpuReading>> all = read_all_gpus("libnvidia-ml-absent.so.1", "/sys");
  EXPECT_EQ(all.status().code(), StatusCode::kUnavailable);
}

TEST(Nvml, LibraryWithoutNvmlEntryPointsIsRefusedByName) {
  // The C library is loadable but is no NVML.
  Result<std::unique_ptr<Nvml>> nvml = Nvml::open("libc.so.6");
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(nvml.status().message().find("lacks nvmlInit"), std::string::npos);
}

TEST(Nvml, DefaultLibraryIsTheDriversUnlessOverridden) {
  unsetenv("MS_NVML_LIBRARY");
  EXPECT_EQ(default_nvml_library(), "libnvidia-ml.so.1");
  setenv("MS_NVML_LIBRARY", MS_FAKE_NVML, 1);
  EXPECT_EQ(default_nvml_library(), MS_FAKE_NVML);
  unsetenv("MS_NVML_LIBRARY");
}

TEST(Nvml, ReadsEveryFieldTheFakeDriverAnswers) {
  Result<std::unique_ptr<Nvml>> nvml = Nvml::open(MS_FAKE_NVML);
  ASSERT_TRUE(nvml.ok()) << nvml.status().message();
  ASSERT_EQ(*(*nvml)->device_count(), 2);
  Result<GpuReading> read = (*nvml)->read(0);
  ASSERT_TRUE(read.ok()) << read.status().message();
  const GpuReading& r = *read;
  EXPECT_EQ(r.name, "Fake GPU");
  EXPECT_EQ(r.bus_id, "00000000:18:00.0");
  EXPECT_EQ(r.driver_version, "550.54.15");
  EXPECT_EQ(r.cuda_driver_version, 12040);
  EXPECT_EQ(r.compute_major, 9);
  EXPECT_EQ(r.memory_total_bytes, 80ull << 30);
  EXPECT_EQ(r.sm_clock_mhz, 1755u);
  EXPECT_EQ(r.sm_clock_max_mhz, 1980u);
  EXPECT_EQ(r.memory_clock_mhz, 2619u);
  EXPECT_DOUBLE_EQ(*r.power_w, 650.5);
  EXPECT_DOUBLE_EQ(*r.power_limit_w, 700);
  EXPECT_FALSE(r.power_default_limit_w.has_value());
  EXPECT_EQ(r.temperature_c, 91u);
  EXPECT_EQ(r.slowdown_temperature_c, 87u);
  EXPECT_EQ(r.shutdown_temperature_c, 92u);
  EXPECT_EQ(r.ecc_enabled, true);
  EXPECT_FALSE(r.mig_enabled.has_value());  // not supported: empty, and not listed as unread
  EXPECT_EQ(r.ecc_volatile_uncorrected, 3u);
  EXPECT_EQ(r.ecc_aggregate_uncorrected, 5u);
  EXPECT_EQ(r.ecc_volatile_corrected, 30u);
  EXPECT_FALSE(r.retired_pages_dbe.has_value());
  EXPECT_EQ(r.remapped_rows_uncorrectable, 1u);
  EXPECT_EQ(r.row_remap_pending, true);
  EXPECT_EQ(r.row_remap_failed, false);
  EXPECT_EQ(r.clock_event_reasons, 0x4u | 0x8u | 0x40u);
  EXPECT_EQ(r.pcie_width, 8u);
  EXPECT_EQ(r.pcie_width_max, 16u);
  ASSERT_EQ(r.nvlinks.size(), 4u);
  EXPECT_FALSE(r.nvlinks[2].active);
  EXPECT_EQ(r.nvlinks[1].crc_flit, 250u);
  EXPECT_EQ(r.nvlinks[0].crc_flit, 0u);
  // Refused for permission, and entry points this "driver" does not export.
  EXPECT_TRUE(unread_has(r, "power_default_limit_w: Insufficient Permissions (nvmlReturn_t 4)"));
  EXPECT_TRUE(unread_has(r, "uuid: not exported by this driver's NVML"));
  EXPECT_TRUE(unread_has(r, "utilization: not exported"));
  EXPECT_FALSE(unread_has(r, "mig_mode"));
  EXPECT_FALSE(unread_has(r, "retired_pages_dbe"));  // not supported
  EXPECT_TRUE(unread_has(r, "retired_pages_pending: not exported"));
}

TEST(Nvml, LostGpuIsReadAsLostAndTheOthersStillRead) {
  Result<std::vector<GpuReading>> all = read_all_gpus(MS_FAKE_NVML, "/nonexistent-sysfs");
  ASSERT_TRUE(all.ok()) << all.status().message();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_TRUE((*all)[0].lost.empty());
  EXPECT_FALSE((*all)[0].numa_node.has_value());
  EXPECT_EQ((*all)[1].index, 1);
  EXPECT_NE((*all)[1].lost.find("GPU is lost"), std::string::npos) << (*all)[1].lost;
  // The fake GPU 0 is hot, throttled, has uncorrectable errors, a narrow link and a down link.
  const GpuVerdict v0 = judge_gpu((*all)[0]);
  EXPECT_EQ(v0.level, GpuLevel::kBad);
  const GpuVerdict v1 = judge_gpu((*all)[1]);
  EXPECT_EQ(v1.level, GpuLevel::kBad);
  EXPECT_EQ(v1.findings.at(0).rule, "gpu_lost");
}

TEST(Nvml, ClosingShutsNvmlDown) {
  // The fake counts nvmlInit against nvmlShutdown; load it ourselves to ask.
  void* fake = dlopen(MS_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(fake, nullptr);
  auto initialised = reinterpret_cast<int (*)()>(dlsym(fake, "fake_nvml_initialised"));
  ASSERT_NE(initialised, nullptr);
  {
    Result<std::unique_ptr<Nvml>> nvml = Nvml::open(MS_FAKE_NVML);
    ASSERT_TRUE(nvml.ok());
    EXPECT_EQ(initialised(), 1);
  }
  EXPECT_EQ(initialised(), 0);
  dlclose(fake);
}

}  // namespace
}  // namespace ms::diag
