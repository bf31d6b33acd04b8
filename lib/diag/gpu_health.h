// Health rules over one GPU's NVML reading (diag/gpu_reading.h): a pure function, tested on
// recorded readings, that calls a GPU bad, suspect or ok and says why. The rules and their
// thresholds are tabled in docs/diagnose.md ("gpu-health").
//
//   bad      do not run a job on it: data may already be wrong, or it needs a reset or repair
//            (volatile uncorrectable ECC errors, a pending or failed row remap, a pending page
//            retirement, too many retired pages, a hardware clock slowdown, temperature at the
//            slowdown threshold, an NVLink down beside active ones, a GPU the driver lost);
//   suspect  runs, but slower or with a history worth a look (software thermal slowdown, close
//            to the slowdown temperature, a PCIe link narrower or slower than its maximum
//            under load, a lowered power limit, aggregate uncorrectable ECC errors, many
//            corrected errors, NVLink recovery or CRC errors);
//   ok       nothing of the above. Facts that are normal but worth printing (power capping
//            under load, MIG enabled, ECC off) are notes and do not change the level.
// A field NVML could not read is never taken as healthy or bad; unread fields are noted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "diag/gpu_reading.h"

namespace ms::diag {

enum class GpuLevel { kOk = 0, kSuspect = 1, kBad = 2 };
std::string_view gpu_level_name(GpuLevel level);  // "ok", "suspect", "bad"

struct GpuThresholds {
  // Retired pages (both causes) at which a pre-Ampere GPU is bad: the retirement table holds
  // few more, so further failing pages can no longer be taken out of use.
  unsigned max_retired_pages = 60;
  // Corrected ECC errors since the driver loaded that make a GPU suspect: single corrected
  // errors are routine on HBM, a steady stream foretells uncorrectable ones.
  uint64_t suspect_corrected_ecc = 1000;
  // Degrees below the slowdown threshold from which a GPU is suspect (it is about to throttle).
  unsigned temperature_margin_c = 5;
  // Enforced power limit below this fraction of the default limit: suspect (someone capped it).
  double min_power_limit_fraction = 0.9;
  // Per NVLink, since the driver loaded: any recovery is suspect, and CRC errors (flit + data)
  // from this count. Replays alone are the link's normal retry mechanism and are not judged.
  uint64_t suspect_nvlink_crc = 100;
};

struct GpuFinding {
  GpuLevel level = GpuLevel::kOk;
  std::string rule;    // short id: "volatile_uncorrectable_ecc", "hw_slowdown", ...
  std::string detail;  // what was read against what: "3 uncorrectable errors since ..."
};

struct GpuVerdict {
  int index = 0;
  std::string name, bus_id;
  GpuLevel level = GpuLevel::kOk;
  std::vector<GpuFinding> findings;  // bad first, then suspect
  std::vector<std::string> notes;
};

GpuVerdict judge_gpu(const GpuReading& reading, const GpuThresholds& thresholds = {});

// The worst level over `verdicts` (kOk for none).
GpuLevel worst_level(const std::vector<GpuVerdict>& verdicts);

// One line per finding at suspect or bad level, for check's verdict:
// "GPU 1 (00000000:18:00.0): bad: row_remap_pending: ...".
std::vector<std::string> gpu_fault_lines(const GpuVerdict& verdict);

// Text for people: one line per GPU ("GPU 0  00000000:18:00.0  NVIDIA H100  bad") followed by
// its findings and notes, indented; then "# GPU health: 1 bad, 0 suspect, 7 ok".
std::string format_gpu_verdicts(const std::vector<GpuVerdict>& verdicts);
nlohmann::ordered_json gpu_verdict_json(const GpuVerdict& verdict);

}  // namespace ms::diag
