// The GPU listing of `ms-diagnose info`; see gpu_info.h.
#include "diag/gpu_info.h"

#include <algorithm>
#include <cstdio>

#include "diag/nvml.h"

namespace ms::diag {

namespace {

template <typename T>
std::string or_dash(const std::optional<T>& value, const char* fmt) {
  if (!value) return "-";
  char text[64];
  std::snprintf(text, sizeof(text), fmt, static_cast<double>(*value));
  return text;
}

std::string pair_text(const std::optional<unsigned>& now, const std::optional<unsigned>& max) {
  return or_dash(now, "%.0f") + "/" + or_dash(max, "%.0f");
}

std::string on_off(const std::optional<bool>& value) {
  return value ? (*value ? "on" : "off") : "-";
}

std::string pcie_text(const GpuReading& r) {
  auto link = [](const std::optional<unsigned>& gen, const std::optional<unsigned>& width) {
    return "gen" + or_dash(gen, "%.0f") + "x" + or_dash(width, "%.0f");
  };
  return link(r.pcie_gen, r.pcie_width) + " (" + link(r.pcie_gen_max, r.pcie_width_max) + ")";
}

std::string nvlink_text(const GpuReading& r) {
  if (r.nvlinks.empty()) return "-";
  const auto up = std::count_if(r.nvlinks.begin(), r.nvlinks.end(),
                                [](const NvLinkReading& l) { return l.active; });
  return std::to_string(up) + "/" + std::to_string(r.nvlinks.size()) + " up";
}

}  // namespace

nlohmann::ordered_json describe_nvml_gpus() {
  nlohmann::ordered_json out;
  Result<std::vector<GpuReading>> readings = read_all_gpus();
  if (!readings.ok()) {
    out["skip"] = readings.status().message();
    return out;
  }
  out = gpu_readings_json(*readings);
  return out;
}

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string format_gpu_table(const std::vector<GpuReading>& readings) {
  std::string out;
  if (!readings.empty()) {
    const GpuReading& first = readings.front();
    out += "# driver " + (first.driver_version.empty() ? "-" : first.driver_version) + ", CUDA " +
           (first.cuda_driver_version ? cuda_version_text(*first.cuda_driver_version) : "-") +
           "\n";
  }
  char line[512];
  std::snprintf(line, sizeof(line),
                "%4s  %-16s  %-26s %7s %4s %11s %11s %9s %5s %4s %4s  %-18s %-9s %4s  %s\n",
                "gpu", "bus id", "name", "mem GiB", "cc", "sm MHz", "mem MHz", "power W",
                "temp", "ecc", "mig", "pcie (max)", "nvlink", "numa", "nearest nic");
  out += line;
  for (const GpuReading& r : readings) {
    if (!r.lost.empty()) {
      std::snprintf(line, sizeof(line), "%4d  lost: %s\n", r.index, r.lost.c_str());
      out += line;
      continue;
    }
    const std::string memory =
        r.memory_total_bytes ? or_dash(std::optional<double>(*r.memory_total_bytes / 1073741824.0),
                                       "%.1f")
                             : "-";
    const std::string cc = r.compute_major ? std::to_string(*r.compute_major) + "." +
                                                 std::to_string(r.compute_minor.value_or(0))
                                           : "-";
    const std::string power = or_dash(r.power_w, "%.0f") + "/" + or_dash(r.power_limit_w, "%.0f");
    std::snprintf(line, sizeof(line),
                  "%4d  %-16s  %-26s %7s %4s %11s %11s %9s %5s %4s %4s  %-18s %-9s %4s  %s\n",
                  r.index, r.bus_id.empty() ? "-" : r.bus_id.c_str(),
                  r.name.empty() ? "-" : r.name.c_str(), memory.c_str(), cc.c_str(),
                  pair_text(r.sm_clock_mhz, r.sm_clock_max_mhz).c_str(),
                  pair_text(r.memory_clock_mhz, r.memory_clock_max_mhz).c_str(), power.c_str(),
                  or_dash(r.temperature_c, "%.0f").c_str(), on_off(r.ecc_enabled).c_str(),
                  on_off(r.mig_enabled).c_str(), pcie_text(r).c_str(), nvlink_text(r).c_str(),
                  or_dash(r.numa_node, "%.0f").c_str(),
                  r.nearest_nic.empty() ? "-" : r.nearest_nic.c_str());
    out += line;
  }
  return out;
}

}  // namespace ms::diag
