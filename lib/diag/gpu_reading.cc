// GpuReading's JSON form. The scalar fields are listed once (for_each_field) and that one list
// serves writing and reading, so the two cannot drift apart.
#include "diag/gpu_reading.h"

#include <cstdio>
#include <set>
#include <type_traits>

#include "core/host_metrics.h"
#include "diag/gpu_topology.h"
#include "diag/nvml_api.h"

namespace ms::diag {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// Calls f(key, field) for every scalar field of `r` (GpuReading or const GpuReading), in the
// order the JSON form lists them. nvlinks and unread are handled beside it.
template <typename Reading, typename F>
void for_each_field(Reading& r, F&& f) {
  f("index", r.index);
  f("name", r.name);
  f("uuid", r.uuid);
  f("bus_id", r.bus_id);
  f("lost", r.lost);
  f("driver_version", r.driver_version);
  f("cuda_driver_version", r.cuda_driver_version);
  f("compute_major", r.compute_major);
  f("compute_minor", r.compute_minor);
  f("memory_total_bytes", r.memory_total_bytes);
  f("memory_used_bytes", r.memory_used_bytes);
  f("utilization_gpu_pct", r.utilization_gpu_pct);
  f("utilization_memory_pct", r.utilization_memory_pct);
  f("sm_clock_mhz", r.sm_clock_mhz);
  f("sm_clock_max_mhz", r.sm_clock_max_mhz);
  f("memory_clock_mhz", r.memory_clock_mhz);
  f("memory_clock_max_mhz", r.memory_clock_max_mhz);
  f("power_w", r.power_w);
  f("power_limit_w", r.power_limit_w);
  f("power_default_limit_w", r.power_default_limit_w);
  f("temperature_c", r.temperature_c);
  f("slowdown_temperature_c", r.slowdown_temperature_c);
  f("shutdown_temperature_c", r.shutdown_temperature_c);
  f("ecc_enabled", r.ecc_enabled);
  f("ecc_pending_enabled", r.ecc_pending_enabled);
  f("mig_enabled", r.mig_enabled);
  f("ecc_volatile_corrected", r.ecc_volatile_corrected);
  f("ecc_volatile_uncorrected", r.ecc_volatile_uncorrected);
  f("ecc_aggregate_corrected", r.ecc_aggregate_corrected);
  f("ecc_aggregate_uncorrected", r.ecc_aggregate_uncorrected);
  f("retired_pages_sbe", r.retired_pages_sbe);
  f("retired_pages_dbe", r.retired_pages_dbe);
  f("retired_pages_pending", r.retired_pages_pending);
  f("remapped_rows_correctable", r.remapped_rows_correctable);
  f("remapped_rows_uncorrectable", r.remapped_rows_uncorrectable);
  f("row_remap_pending", r.row_remap_pending);
  f("row_remap_failed", r.row_remap_failed);
  f("clock_event_reasons", r.clock_event_reasons);
  f("pcie_gen", r.pcie_gen);
  f("pcie_gen_max", r.pcie_gen_max);
  f("pcie_width", r.pcie_width);
  f("pcie_width_max", r.pcie_width_max);
  f("numa_node", r.numa_node);
  f("nearest_nic", r.nearest_nic);
}

template <typename T>
struct Unwrap {
  using type = T;
  static constexpr bool optional = false;
};
template <typename T>
struct Unwrap<std::optional<T>> {
  using type = T;
  static constexpr bool optional = true;
};

template <typename T>
void put(ordered_json& j, const char* key, const T& value) {
  if constexpr (Unwrap<T>::optional) {
    if (value) j[key] = *value;
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!value.empty()) j[key] = value;
  } else {
    j[key] = value;
  }
}

// Whether `v` can be held by T without loss: integers must be integral and in range, booleans
// booleans, strings strings; a double takes any number.
template <typename T>
bool fits(const json& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string();
  } else if constexpr (std::is_floating_point_v<T>) {
    return v.is_number();
  } else if constexpr (std::is_unsigned_v<T>) {
    return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
  } else {
    return v.is_number_integer();
  }
}

template <typename T>
Status get(const json& j, const char* key, const std::string& where, T& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::OK();
  using Value = typename Unwrap<T>::type;
  if (!fits<Value>(*it)) {
    return InvalidArgument(where + ": \"" + key + "\" has the wrong type (" + it->dump() + ")");
  }
  out = it->template get<Value>();
  return Status::OK();
}

constexpr const char* kNvLinkCounters[] = {"replay", "recovery", "crc_flit", "crc_data"};

template <typename Link>
auto* nvlink_counter(Link& link, int i) {
  switch (i) {
    case 0: return &link.replay;
    case 1: return &link.recovery;
    case 2: return &link.crc_flit;
    default: return &link.crc_data;
  }
}

Result<NvLinkReading> nvlink_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument(where + ": an NVLink entry must be an object");
  NvLinkReading link;
  std::set<std::string> known = {"link", "active"};
  MS_RETURN_IF_ERROR(get(j, "link", where, link.link));
  MS_RETURN_IF_ERROR(get(j, "active", where, link.active));
  for (int i = 0; i < 4; ++i) {
    known.insert(kNvLinkCounters[i]);
    MS_RETURN_IF_ERROR(get(j, kNvLinkCounters[i], where, *nvlink_counter(link, i)));
  }
  for (const auto& [key, value] : j.items()) {
    if (!known.count(key)) return InvalidArgument(where + ": unknown key \"" + key + "\"");
  }
  return link;
}

}  // namespace

ordered_json gpu_reading_json(const GpuReading& reading) {
  ordered_json j = ordered_json::object();
  for_each_field(reading, [&](const char* key, const auto& value) { put(j, key, value); });
  if (reading.clock_event_reasons) {
    j["clock_event_reason_names"] = clock_event_reason_names(*reading.clock_event_reasons);
  }
  ordered_json links = ordered_json::array();
  for (const NvLinkReading& link : reading.nvlinks) {
    ordered_json l;
    l["link"] = link.link;
    l["active"] = link.active;
    for (int i = 0; i < 4; ++i) put(l, kNvLinkCounters[i], *nvlink_counter(link, i));
    links.push_back(std::move(l));
  }
  if (!links.empty()) j["nvlinks"] = std::move(links);
  if (!reading.unread.empty()) j["unread"] = reading.unread;
  return j;
}

Result<GpuReading> gpu_reading_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument(where + ": a GPU reading must be a JSON object");
  GpuReading r;
  std::set<std::string> known = {"nvlinks", "unread", "clock_event_reason_names"};
  Status status = Status::OK();
  for_each_field(r, [&](const char* key, auto& value) {
    known.insert(key);
    if (status.ok()) status = get(j, key, where, value);
  });
  MS_RETURN_IF_ERROR(status);
  for (const auto& [key, value] : j.items()) {
    if (!known.count(key)) return InvalidArgument(where + ": unknown key \"" + key + "\"");
  }
  if (auto it = j.find("nvlinks"); it != j.end()) {
    if (!it->is_array()) return InvalidArgument(where + ": \"nvlinks\" must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      MS_ASSIGN_OR_RETURN(NvLinkReading link,
                          nvlink_from_json((*it)[i], where + " nvlinks[" + std::to_string(i) + "]"));
      r.nvlinks.push_back(link);
    }
  }
  if (auto it = j.find("unread"); it != j.end()) {
    if (!it->is_array()) return InvalidArgument(where + ": \"unread\" must be an array");
    for (const json& u : *it) {
      if (!u.is_string()) return InvalidArgument(where + ": \"unread\" holds strings");
      r.unread.push_back(u.get<std::string>());
    }
  }
  return r;
}

ordered_json gpu_readings_json(const std::vector<GpuReading>& readings) {
  ordered_json doc;
  doc["gpus"] = ordered_json::array();
  for (const GpuReading& r : readings) doc["gpus"].push_back(gpu_reading_json(r));
  return doc;
}

Result<std::vector<GpuReading>> parse_gpu_readings(const std::string& text,
                                                   const std::string& where) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(where + ": not valid JSON");
  std::vector<GpuReading> readings;
  if (doc.is_object() && doc.contains("gpus")) {
    const json& gpus = doc["gpus"];
    if (!gpus.is_array()) return InvalidArgument(where + ": \"gpus\" must be an array");
    for (size_t i = 0; i < gpus.size(); ++i) {
      MS_ASSIGN_OR_RETURN(GpuReading r,
                          gpu_reading_from_json(gpus[i], where + " gpus[" + std::to_string(i) + "]"));
      readings.push_back(std::move(r));
    }
  } else {
    MS_ASSIGN_OR_RETURN(GpuReading r, gpu_reading_from_json(doc, where));
    readings.push_back(std::move(r));
  }
  return readings;
}

Result<std::vector<GpuReading>> read_gpu_readings_file(const std::string& path) {
  MS_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_gpu_readings(text, path);
}

const GpuReading* find_reading_by_bus_id(const std::vector<GpuReading>& readings,
                                         const std::string& bus_id) {
  const std::string wanted = sysfs_pci_address(bus_id);
  for (const GpuReading& r : readings) {
    if (!r.bus_id.empty() && sysfs_pci_address(r.bus_id) == wanted) return &r;
  }
  return nullptr;
}

std::vector<std::string> clock_event_reason_names(uint64_t reasons) {
  static constexpr std::pair<uint64_t, const char*> kNames[] = {
      {nvml_api::kClocksGpuIdle, "gpu_idle"},
      {nvml_api::kClocksApplicationsSetting, "applications_clocks_setting"},
      {nvml_api::kClocksSwPowerCap, "sw_power_cap"},
      {nvml_api::kClocksHwSlowdown, "hw_slowdown"},
      {nvml_api::kClocksSyncBoost, "sync_boost"},
      {nvml_api::kClocksSwThermalSlowdown, "sw_thermal_slowdown"},
      {nvml_api::kClocksHwThermalSlowdown, "hw_thermal_slowdown"},
      {nvml_api::kClocksHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
      {nvml_api::kClocksDisplaySetting, "display_clock_setting"}};
  std::vector<std::string> names;
  uint64_t known = 0;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if (reasons & bit) names.emplace_back(name);
  }
  if (const uint64_t rest = reasons & ~known; rest != 0) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(rest));
    names.emplace_back(hex);
  }
  return names;
}

}  // namespace ms::diag
