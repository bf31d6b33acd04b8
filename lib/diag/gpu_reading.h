// One GPU's state as NVML reported it at one moment (diag/nvml.h reads it; diag/gpu_health.h
// judges it), with a JSON form so a reading taken on a GPU node can be recorded and replayed
// anywhere: the health rules are tested on recorded readings, and `ms-diagnose gpu-health
// --replay` judges a file as it would judge the live GPU.
//
// Every query NVML may refuse (a field the GPU or driver does not support, or that needs root)
// is a std::optional: empty means "not read", which the rules never take for healthy or bad.
// The JSON form leaves such fields out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ms::diag {

struct NvLinkReading {
  int link = 0;
  bool active = false;
  // Error counters since the driver loaded (NVML's nvmlNvLinkErrorCounter_t).
  std::optional<uint64_t> replay, recovery, crc_flit, crc_data;
};

struct GpuReading {
  int index = 0;  // NVML's index (the order of nvidia-smi, not CUDA_VISIBLE_DEVICES')
  std::string name;
  std::string uuid;
  std::string bus_id;  // "00000000:18:00.0", as nvidia-smi prints it
  // Why NVML could not reach this GPU at all (its handle query failed: "GPU is lost"); empty
  // when it could. A lost GPU is bad (gpu_health.h) and the other GPUs are still read.
  std::string lost;
  std::string driver_version;
  std::optional<int> cuda_driver_version;  // 12040 for CUDA 12.4
  std::optional<int> compute_major, compute_minor;
  std::optional<uint64_t> memory_total_bytes, memory_used_bytes;
  std::optional<unsigned> utilization_gpu_pct, utilization_memory_pct;
  std::optional<unsigned> sm_clock_mhz, sm_clock_max_mhz, memory_clock_mhz, memory_clock_max_mhz;
  std::optional<double> power_w, power_limit_w, power_default_limit_w;
  std::optional<unsigned> temperature_c, slowdown_temperature_c, shutdown_temperature_c;
  std::optional<bool> ecc_enabled, ecc_pending_enabled, mig_enabled;
  // ECC error counts: volatile since the driver loaded, aggregate over the GPU's life.
  std::optional<uint64_t> ecc_volatile_corrected, ecc_volatile_uncorrected;
  std::optional<uint64_t> ecc_aggregate_corrected, ecc_aggregate_uncorrected;
  // Page retirement (before Ampere): pages retired for repeated single-bit and for double-bit
  // errors, and whether a retirement waits for a driver reload.
  std::optional<unsigned> retired_pages_sbe, retired_pages_dbe;
  std::optional<bool> retired_pages_pending;
  // Row remapping (Ampere and later): rows remapped for correctable and uncorrectable errors,
  // whether a remap waits for a GPU reset, and whether a remap ever failed.
  std::optional<unsigned> remapped_rows_correctable, remapped_rows_uncorrectable;
  std::optional<bool> row_remap_pending, row_remap_failed;
  std::optional<uint64_t> clock_event_reasons;  // nvmlClocksEventReasons bits
  std::optional<unsigned> pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
  std::vector<NvLinkReading> nvlinks;  // links the GPU has (empty without NVLink)
  // From sysfs (diag/gpu_topology.h), not NVML.
  std::optional<int> numa_node;
  std::string nearest_nic;
  // Fields whose query failed for a reason other than "not supported", with that reason.
  std::vector<std::string> unread;
};

nlohmann::ordered_json gpu_reading_json(const GpuReading& reading);
// InvalidArgument naming the key (and `where`, e.g. "file.json gpus[1]") for a value of the
// wrong type or an unknown key, so a mistyped fixture is not silently read as "not read".
Result<GpuReading> gpu_reading_from_json(const nlohmann::json& j, const std::string& where);

// A recording: {"gpus": [reading, ...]} (what `ms-diagnose gpu-health --record` writes), or a
// single reading object.
nlohmann::ordered_json gpu_readings_json(const std::vector<GpuReading>& readings);
Result<std::vector<GpuReading>> parse_gpu_readings(const std::string& text,
                                                   const std::string& where);
Result<std::vector<GpuReading>> read_gpu_readings_file(const std::string& path);

// The reading of the GPU at PCI address `bus_id` (NVML's or the CUDA runtime's spelling; case
// and the domain's width do not matter), or nullptr.
const GpuReading* find_reading_by_bus_id(const std::vector<GpuReading>& readings,
                                         const std::string& bus_id);

// The clock event reason bits by NVML's names ("hw_slowdown", "sw_power_cap", ...), lowest
// bit first; unknown bits as "0x...".
std::vector<std::string> clock_event_reason_names(uint64_t reasons);

}  // namespace ms::diag
