// NVML, the driver's management library, loaded at run time with dlopen: the toolkit has no
// link-time dependency on it, so the same binaries run on machines without an NVIDIA driver,
// where opening it fails with a named reason that callers print as a skip line.
//
// Each GPU is read into a GpuReading (diag/gpu_reading.h): identity, versions, memory, clocks,
// power, temperature, ECC mode and counters, retired pages or remapped rows, clock event
// (throttle) reasons, PCIe link against its maximum, MIG mode and NVLink state and error
// counters. A query the GPU does not support leaves its field empty; any other failing query
// is listed in GpuReading::unread and the rest is still read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "diag/gpu_reading.h"

namespace ms::diag {

// The library NVML is loaded from: $MS_NVML_LIBRARY when set (a testing aid: tests load a fake
// NVML through it), otherwise "libnvidia-ml.so.1", the name the driver installs.
std::string default_nvml_library();

class Nvml {
 public:
  // dlopens `library` and initialises NVML. kUnavailable when the library cannot be opened
  // ("NVML not available: libnvidia-ml.so.1: cannot open shared object file ... (no NVIDIA
  // driver on this machine)"), lacks its entry points, or nvmlInit fails (its reason).
  static Result<std::unique_ptr<Nvml>> open(const std::string& library = default_nvml_library());
  ~Nvml();  // nvmlShutdown, then dlclose
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  Result<int> device_count();
  // The NVML fields of GPU `index`; numa_node and nearest_nic are left to gpu_topology.h.
  Result<GpuReading> read(int index);

  struct Api;  // the resolved entry points (nvml.cc)

 private:
  Nvml(void* handle, std::unique_ptr<Api> api);
  void* handle_;
  std::unique_ptr<Api> api_;
};

// Every GPU NVML sees, each with its sysfs topology (gpu_topology.h, under `sysfs_root`).
// kUnavailable as Nvml::open when NVML cannot be loaded.
Result<std::vector<GpuReading>> read_all_gpus(const std::string& library = default_nvml_library(),
                                              const std::string& sysfs_root = "/sys");

}  // namespace ms::diag
