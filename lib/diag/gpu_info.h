// The GPU part of `ms-diagnose info`: every GPU of a rank's machine as NVML describes it
// (diag/nvml.h), or the reason NVML could not be read, and the per-machine table of it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diag/gpu_reading.h"

namespace ms::diag {

// {"gpus": [reading, ...]} from NVML (gpu_reading_json), or {"skip": "NVML not available: ..."}.
nlohmann::ordered_json describe_nvml_gpus();

// One line of column titles and one row per GPU: index, bus id, name, memory, compute
// capability, SM and memory clocks against their maxima, power against the limit, temperature,
// ECC and MIG modes, PCIe link against its maximum, NVLinks up, NUMA node and nearest NIC.
// A field NVML did not give is "-". Preceded by the driver and CUDA versions.
std::string format_gpu_table(const std::vector<GpuReading>& readings);

// "12.4" from NVML's 12040.
std::string cuda_version_text(int version);

}  // namespace ms::diag
