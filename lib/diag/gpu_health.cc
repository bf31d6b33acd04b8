// The GPU health rules; see gpu_health.h and the table in docs/diagnose.md.
#include "diag/gpu_health.h"

#include <algorithm>
#include <cstdio>

#include "diag/nvml_api.h"

namespace ms::diag {

namespace {

using nlohmann::ordered_json;
namespace api = nvml_api;

std::string format(const char* fmt, double a, double b = 0, double c = 0) {
  char text[200];
  std::snprintf(text, sizeof(text), fmt, a, b, c);
  return text;
}

class Judge {
 public:
  Judge(const GpuReading& r, const GpuThresholds& t, GpuVerdict& v) : r_(r), t_(t), v_(v) {}

  void add(GpuLevel level, std::string rule, std::string detail) {
    v_.findings.push_back({level, std::move(rule), std::move(detail)});
    v_.level = std::max(v_.level, level);
  }
  void note(std::string text) { v_.notes.push_back(std::move(text)); }

  void memory_errors() {
    if (r_.ecc_volatile_uncorrected.value_or(0) > 0) {
      add(GpuLevel::kBad, "volatile_uncorrectable_ecc",
          format("%.0f uncorrectable ECC errors since the driver loaded: results computed on "
                 "this GPU may be wrong",
                 static_cast<double>(*r_.ecc_volatile_uncorrected)));
    } else if (r_.ecc_aggregate_uncorrected.value_or(0) > 0) {
      add(GpuLevel::kSuspect, "aggregate_uncorrectable_ecc",
          format("%.0f uncorrectable ECC errors over the GPU's life (none since the driver "
                 "loaded)",
                 static_cast<double>(*r_.ecc_aggregate_uncorrected)));
    }
    if (r_.ecc_volatile_corrected.value_or(0) >= t_.suspect_corrected_ecc) {
      add(GpuLevel::kSuspect, "corrected_ecc",
          format("%.0f corrected ECC errors since the driver loaded (suspect from %.0f)",
                 static_cast<double>(*r_.ecc_volatile_corrected),
                 static_cast<double>(t_.suspect_corrected_ecc)));
    }
    if (r_.row_remap_failed.value_or(false)) {
      add(GpuLevel::kBad, "row_remap_failed",
          "a row remapping failed: the memory can no longer be repaired in the field");
    }
    if (r_.row_remap_pending.value_or(false)) {
      add(GpuLevel::kBad, "row_remap_pending",
          format("a row remapping is pending (%.0f rows remapped for uncorrectable errors): "
                 "reset the GPU before use",
                 static_cast<double>(r_.remapped_rows_uncorrectable.value_or(0))));
    }
    if (r_.retired_pages_pending.value_or(false)) {
      add(GpuLevel::kBad, "retired_pages_pending",
          "a page retirement is pending: reload the driver (or reset the GPU) before use");
    }
    const unsigned retired = r_.retired_pages_sbe.value_or(0) + r_.retired_pages_dbe.value_or(0);
    if (retired >= t_.max_retired_pages) {
      add(GpuLevel::kBad, "retired_pages",
          format("%.0f retired pages (%.0f double-bit): at or above %.0f", retired,
                 r_.retired_pages_dbe.value_or(0), t_.max_retired_pages));
    } else if (retired > 0) {
      note(format("%.0f retired pages (%.0f double-bit)", retired,
                  r_.retired_pages_dbe.value_or(0)));
    }
    if (r_.remapped_rows_uncorrectable.value_or(0) + r_.remapped_rows_correctable.value_or(0) > 0 &&
        !r_.row_remap_pending.value_or(false) && !r_.row_remap_failed.value_or(false)) {
      note(format("%.0f rows remapped (%.0f for uncorrectable errors), repaired",
                  r_.remapped_rows_uncorrectable.value_or(0) +
                      r_.remapped_rows_correctable.value_or(0),
                  r_.remapped_rows_uncorrectable.value_or(0)));
    }
    if (r_.ecc_enabled.has_value() && !*r_.ecc_enabled) {
      note("ECC is disabled: memory errors go undetected and uncounted");
    }
    if (r_.ecc_enabled && r_.ecc_pending_enabled && *r_.ecc_enabled != *r_.ecc_pending_enabled) {
      note(std::string("ECC will be ") + (*r_.ecc_pending_enabled ? "enabled" : "disabled") +
           " at the next reset");
    }
  }

  void clocks_and_heat() {
    if (r_.clock_event_reasons) {
      const uint64_t reasons = *r_.clock_event_reasons;
      if (reasons & api::kClocksHwThermalSlowdown) {
        add(GpuLevel::kBad, "hw_thermal_slowdown",
            "hardware thermal slowdown engaged: clocks cut by half or more (cooling failure?)");
      }
      if (reasons & api::kClocksHwPowerBrakeSlowdown) {
        add(GpuLevel::kBad, "hw_power_brake_slowdown",
            "hardware power brake engaged: clocks cut by half or more (the power supply "
            "asserted it)");
      }
      if ((reasons & api::kClocksHwSlowdown) &&
          !(reasons & (api::kClocksHwThermalSlowdown | api::kClocksHwPowerBrakeSlowdown))) {
        add(GpuLevel::kBad, "hw_slowdown",
            "hardware slowdown engaged: clocks cut by half or more (temperature, power brake "
            "or fast power trigger)");
      }
      if (reasons & api::kClocksSwThermalSlowdown) {
        add(GpuLevel::kSuspect, "sw_thermal_slowdown",
            "software thermal slowdown: the driver lowers clocks to hold the temperature");
      }
      if (reasons & api::kClocksSwPowerCap) {
        note("clocks held to the power limit (normal under a heavy load)");
      }
    }
    if (r_.temperature_c && r_.slowdown_temperature_c) {
      const double temperature = *r_.temperature_c;
      const double slowdown = *r_.slowdown_temperature_c;
      if (temperature >= slowdown) {
        add(GpuLevel::kBad, "temperature",
            format("%.0f C, at or above the slowdown threshold %.0f C", temperature, slowdown));
      } else if (temperature + t_.temperature_margin_c >= slowdown) {
        add(GpuLevel::kSuspect, "temperature",
            format("%.0f C, within %.0f C of the slowdown threshold %.0f C", temperature,
                   t_.temperature_margin_c, slowdown));
      }
    }
    if (r_.power_limit_w && r_.power_default_limit_w && *r_.power_default_limit_w > 0 &&
        *r_.power_limit_w < t_.min_power_limit_fraction * *r_.power_default_limit_w) {
      add(GpuLevel::kSuspect, "power_limit",
          format("power limit %.0f W is below %.0f%% of the default %.0f W", *r_.power_limit_w,
                 100 * t_.min_power_limit_fraction, *r_.power_default_limit_w));
    }
  }

  void links() {
    if (r_.pcie_width && r_.pcie_width_max && *r_.pcie_width < *r_.pcie_width_max) {
      add(GpuLevel::kSuspect, "pcie_width",
          format("PCIe link x%.0f, below its maximum x%.0f (host transfers slowed by %.0f%%)",
                 *r_.pcie_width, *r_.pcie_width_max,
                 100.0 * (1.0 - static_cast<double>(*r_.pcie_width) / *r_.pcie_width_max)));
    }
    if (r_.pcie_gen && r_.pcie_gen_max && *r_.pcie_gen < *r_.pcie_gen_max) {
      // An idle GPU trains its link down to save power; only a busy one is judged.
      const bool idle = r_.clock_event_reasons && (*r_.clock_event_reasons & api::kClocksGpuIdle);
      const std::string text = format("PCIe gen %.0f, below its maximum gen %.0f",
                                      *r_.pcie_gen, *r_.pcie_gen_max);
      if (idle) {
        note(text + " (normal while idle)");
      } else {
        add(GpuLevel::kSuspect, "pcie_gen", text + " while not idle");
      }
    }
    const auto active = std::count_if(r_.nvlinks.begin(), r_.nvlinks.end(),
                                      [](const NvLinkReading& l) { return l.active; });
    for (const NvLinkReading& l : r_.nvlinks) {
      const std::string link = "NVLink " + std::to_string(l.link);
      if (!l.active && active > 0) {
        add(GpuLevel::kBad, "nvlink_down",
            link + " is down while " + std::to_string(active) + " other links are active");
      }
      if (l.recovery.value_or(0) > 0) {
        add(GpuLevel::kSuspect, "nvlink_recovery",
            link + ": " + std::to_string(*l.recovery) + " recoveries since the driver loaded");
      }
      const uint64_t crc = l.crc_flit.value_or(0) + l.crc_data.value_or(0);
      if (crc >= t_.suspect_nvlink_crc) {
        add(GpuLevel::kSuspect, "nvlink_crc",
            link + ": " + std::to_string(crc) + " CRC errors (flit + data) since the driver "
                   "loaded (suspect from " + std::to_string(t_.suspect_nvlink_crc) + ")");
      }
    }
  }

  void other_notes() {
    if (r_.mig_enabled.value_or(false)) note("MIG mode is enabled");
    for (const std::string& unread : r_.unread) note("not read: " + unread);
  }

 private:
  const GpuReading& r_;
  const GpuThresholds& t_;
  GpuVerdict& v_;
};

}  // namespace

std::string_view gpu_level_name(GpuLevel level) {
  switch (level) {
    case GpuLevel::kOk: return "ok";
    case GpuLevel::kSuspect: return "suspect";
    case GpuLevel::kBad: return "bad";
  }
  return "ok";
}

GpuVerdict judge_gpu(const GpuReading& reading, const GpuThresholds& thresholds) {
  GpuVerdict verdict;
  verdict.index = reading.index;
  verdict.name = reading.name;
  verdict.bus_id = reading.bus_id;
  Judge judge(reading, thresholds, verdict);
  if (!reading.lost.empty()) {
    judge.add(GpuLevel::kBad, "gpu_lost", "NVML cannot reach the GPU: " + reading.lost);
    return verdict;
  }
  judge.memory_errors();
  judge.clocks_and_heat();
  judge.links();
  judge.other_notes();
  std::stable_sort(verdict.findings.begin(), verdict.findings.end(),
                   [](const GpuFinding& a, const GpuFinding& b) { return a.level > b.level; });
  return verdict;
}

GpuLevel worst_level(const std::vector<GpuVerdict>& verdicts) {
  GpuLevel worst = GpuLevel::kOk;
  for (const GpuVerdict& v : verdicts) worst = std::max(worst, v.level);
  return worst;
}

std::vector<std::string> gpu_fault_lines(const GpuVerdict& verdict) {
  std::vector<std::string> lines;
  const std::string gpu = "GPU " + std::to_string(verdict.index) +
                          (verdict.bus_id.empty() ? "" : " (" + verdict.bus_id + ")");
  for (const GpuFinding& f : verdict.findings) {
    if (f.level == GpuLevel::kOk) continue;
    lines.push_back(gpu + ": " + std::string(gpu_level_name(f.level)) + ": " + f.rule + ": " +
                    f.detail);
  }
  return lines;
}

std::string format_gpu_verdicts(const std::vector<GpuVerdict>& verdicts) {
  std::string out;
  int counts[3] = {0, 0, 0};
  for (const GpuVerdict& v : verdicts) {
    ++counts[static_cast<int>(v.level)];
    char line[256];
    std::snprintf(line, sizeof(line), "GPU %-3d %-18s %-28s %s\n", v.index,
                  v.bus_id.empty() ? "-" : v.bus_id.c_str(), v.name.empty() ? "-" : v.name.c_str(),
                  std::string(gpu_level_name(v.level)).c_str());
    out += line;
    for (const GpuFinding& f : v.findings) {
      out += "    " + std::string(gpu_level_name(f.level)) + ": " + f.rule + ": " + f.detail + "\n";
    }
    for (const std::string& n : v.notes) out += "    note: " + n + "\n";
  }
  out += "# GPU health: " + std::to_string(counts[2]) + " bad, " + std::to_string(counts[1]) +
         " suspect, " + std::to_string(counts[0]) + " ok\n";
  return out;
}

ordered_json gpu_verdict_json(const GpuVerdict& verdict) {
  ordered_json j;
  j["index"] = verdict.index;
  j["name"] = verdict.name;
  j["bus_id"] = verdict.bus_id;
  j["level"] = gpu_level_name(verdict.level);
  j["findings"] = ordered_json::array();
  for (const GpuFinding& f : verdict.findings) {
    j["findings"].push_back(
        {{"level", gpu_level_name(f.level)}, {"rule", f.rule}, {"detail", f.detail}});
  }
  j["notes"] = verdict.notes;
  return j;
}

}  // namespace ms::diag
