// NVML through dlopen/dlsym; see nvml.h. The entry points are looked up by NVML's exported
// names (newest version first: the unversioned names are the old ABI), and each GPU field is
// one query whose failure leaves only that field unread.
#include "diag/nvml.h"

#include <dlfcn.h>

#include <cstdlib>
#include <optional>

#include "diag/gpu_topology.h"
#include "diag/nvml_api.h"

namespace ms::diag {

namespace api = nvml_api;

struct Nvml::Api {
  api::InitFn init = nullptr;
  api::ShutdownFn shutdown = nullptr;
  api::ErrorStringFn error_string = nullptr;
  api::CharBufferFn driver_version = nullptr;
  api::IntOutFn cuda_driver_version = nullptr;
  api::UnsignedOutFn device_count = nullptr;
  api::HandleByIndexFn handle_by_index = nullptr;
  api::DeviceStringFn name = nullptr;
  api::DeviceStringFn uuid = nullptr;
  api::PciInfoFn pci_info = nullptr;
  api::MemoryFn memory = nullptr;
  api::UtilizationFn utilization = nullptr;
  api::ComputeCapabilityFn compute_capability = nullptr;
  api::DeviceKindUnsignedFn clock = nullptr;
  api::DeviceKindUnsignedFn max_clock = nullptr;
  api::DeviceUnsignedFn power_usage = nullptr;
  api::DeviceUnsignedFn enforced_power_limit = nullptr;
  api::DeviceUnsignedFn default_power_limit = nullptr;
  api::DeviceKindUnsignedFn temperature = nullptr;
  api::DeviceKindUnsignedFn temperature_threshold = nullptr;
  api::DeviceEnablePairFn ecc_mode = nullptr;
  api::DeviceUnsignedPairFn mig_mode = nullptr;
  api::EccErrorsFn ecc_errors = nullptr;
  api::RetiredPagesFn retired_pages = nullptr;
  api::DeviceEnableFn retired_pages_pending = nullptr;
  api::RemappedRowsFn remapped_rows = nullptr;
  api::DeviceU64Fn clock_event_reasons = nullptr;
  api::DeviceUnsignedFn pcie_gen = nullptr;
  api::DeviceUnsignedFn pcie_width = nullptr;
  api::DeviceUnsignedFn pcie_gen_max = nullptr;
  api::DeviceUnsignedFn pcie_width_max = nullptr;
  api::NvLinkStateFn nvlink_state = nullptr;
  api::NvLinkErrorFn nvlink_error = nullptr;

  std::string error(api::Return rc) const {
    const char* text = error_string ? error_string(rc) : nullptr;
    return (text ? std::string(text) : "NVML error") + " (nvmlReturn_t " + std::to_string(rc) + ")";
  }
};

namespace {

// The first of `names` the library exports, as a function pointer of type Fn (nullptr if none).
template <typename Fn>
void resolve(void* handle, Fn& out, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* symbol = dlsym(handle, name)) {
      out = reinterpret_cast<Fn>(symbol);
      return;
    }
  }
}

void resolve_all(void* h, Nvml::Api& a) {
  resolve(h, a.init, {"nvmlInit_v2", "nvmlInit"});
  resolve(h, a.shutdown, {"nvmlShutdown"});
  resolve(h, a.error_string, {"nvmlErrorString"});
  resolve(h, a.driver_version, {"nvmlSystemGetDriverVersion"});
  resolve(h, a.cuda_driver_version,
          {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"});
  resolve(h, a.device_count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  resolve(h, a.handle_by_index, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  resolve(h, a.name, {"nvmlDeviceGetName"});
  resolve(h, a.uuid, {"nvmlDeviceGetUUID"});
  resolve(h, a.pci_info, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"});
  resolve(h, a.memory, {"nvmlDeviceGetMemoryInfo"});
  resolve(h, a.utilization, {"nvmlDeviceGetUtilizationRates"});
  resolve(h, a.compute_capability, {"nvmlDeviceGetCudaComputeCapability"});
  resolve(h, a.clock, {"nvmlDeviceGetClockInfo"});
  resolve(h, a.max_clock, {"nvmlDeviceGetMaxClockInfo"});
  resolve(h, a.power_usage, {"nvmlDeviceGetPowerUsage"});
  resolve(h, a.enforced_power_limit, {"nvmlDeviceGetEnforcedPowerLimit"});
  resolve(h, a.default_power_limit, {"nvmlDeviceGetPowerManagementDefaultLimit"});
  resolve(h, a.temperature, {"nvmlDeviceGetTemperature"});
  resolve(h, a.temperature_threshold, {"nvmlDeviceGetTemperatureThreshold"});
  resolve(h, a.ecc_mode, {"nvmlDeviceGetEccMode"});
  resolve(h, a.mig_mode, {"nvmlDeviceGetMigMode"});
  resolve(h, a.ecc_errors, {"nvmlDeviceGetTotalEccErrors"});
  resolve(h, a.retired_pages, {"nvmlDeviceGetRetiredPages"});
  resolve(h, a.retired_pages_pending, {"nvmlDeviceGetRetiredPagesPendingStatus"});
  resolve(h, a.remapped_rows, {"nvmlDeviceGetRemappedRows"});
  // Renamed in R535: "event reasons" is the new name of the same bits.
  resolve(h, a.clock_event_reasons,
          {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  resolve(h, a.pcie_gen, {"nvmlDeviceGetCurrPcieLinkGeneration"});
  resolve(h, a.pcie_width, {"nvmlDeviceGetCurrPcieLinkWidth"});
  resolve(h, a.pcie_gen_max, {"nvmlDeviceGetMaxPcieLinkGeneration"});
  resolve(h, a.pcie_width_max, {"nvmlDeviceGetMaxPcieLinkWidth"});
  resolve(h, a.nvlink_state, {"nvmlDeviceGetNvLinkState"});
  resolve(h, a.nvlink_error, {"nvmlDeviceGetNvLinkErrorCounter"});
}

// Reads one GPU's fields; each query records its own failure and the others go on.
class DeviceReader {
 public:
  DeviceReader(const Nvml::Api& a, api::Device device, GpuReading& r)
      : a_(a), device_(device), r_(r) {}

  // Calls fn(device, args..., &out); true on success. A missing entry point or a failure other
  // than "not supported" is listed in unread under `field`.
  template <typename Fn, typename... Args>
  bool call(const char* field, Fn fn, Args... args) {
    if (fn == nullptr) {
      r_.unread.push_back(std::string(field) + ": not exported by this driver's NVML");
      return false;
    }
    const api::Return rc = fn(device_, args...);
    if (rc == api::kSuccess) return true;
    if (rc != api::kErrorNotSupported) r_.unread.push_back(std::string(field) + ": " + a_.error(rc));
    return false;
  }

  void strings() {
    char text[api::kDeviceNameBufferSize] = {0};
    if (call("name", a_.name, text, api::kDeviceNameBufferSize)) r_.name = text;
    char uuid[api::kDeviceUuidBufferSize] = {0};
    if (call("uuid", a_.uuid, uuid, api::kDeviceUuidBufferSize)) r_.uuid = uuid;
    api::PciInfo pci{};
    if (call("bus_id", a_.pci_info, &pci)) r_.bus_id = pci.bus_id;
  }

  void memory_and_compute() {
    api::Memory memory{};
    if (call("memory", a_.memory, &memory)) {
      r_.memory_total_bytes = memory.total;
      r_.memory_used_bytes = memory.used;
    }
    api::Utilization util{};
    if (call("utilization", a_.utilization, &util)) {
      r_.utilization_gpu_pct = util.gpu;
      r_.utilization_memory_pct = util.memory;
    }
    int major = 0, minor = 0;
    if (call("compute_capability", a_.compute_capability, &major, &minor)) {
      r_.compute_major = major;
      r_.compute_minor = minor;
    }
  }

  void clocks_power_temperature() {
    read_kind("sm_clock_mhz", a_.clock, api::kClockSm, r_.sm_clock_mhz);
    read_kind("sm_clock_max_mhz", a_.max_clock, api::kClockSm, r_.sm_clock_max_mhz);
    read_kind("memory_clock_mhz", a_.clock, api::kClockMem, r_.memory_clock_mhz);
    read_kind("memory_clock_max_mhz", a_.max_clock, api::kClockMem, r_.memory_clock_max_mhz);
    read_milliwatts("power_w", a_.power_usage, r_.power_w);
    read_milliwatts("power_limit_w", a_.enforced_power_limit, r_.power_limit_w);
    read_milliwatts("power_default_limit_w", a_.default_power_limit, r_.power_default_limit_w);
    read_kind("temperature_c", a_.temperature, api::kTemperatureGpu, r_.temperature_c);
    read_kind("slowdown_temperature_c", a_.temperature_threshold,
              api::kTemperatureThresholdSlowdown, r_.slowdown_temperature_c);
    read_kind("shutdown_temperature_c", a_.temperature_threshold,
              api::kTemperatureThresholdShutdown, r_.shutdown_temperature_c);
    unsigned long long reasons = 0;
    if (call("clock_event_reasons", a_.clock_event_reasons, &reasons)) {
      r_.clock_event_reasons = reasons;
    }
  }

  void modes() {
    int ecc = 0, ecc_pending = 0;
    if (call("ecc_mode", a_.ecc_mode, &ecc, &ecc_pending)) {
      r_.ecc_enabled = ecc != 0;
      r_.ecc_pending_enabled = ecc_pending != 0;
    }
    unsigned mig = 0, mig_pending = 0;
    if (call("mig_mode", a_.mig_mode, &mig, &mig_pending)) r_.mig_enabled = mig != 0;
  }

  void memory_errors() {
    read_ecc("ecc_volatile_corrected", api::kMemoryErrorCorrected, api::kVolatileEcc,
             r_.ecc_volatile_corrected);
    read_ecc("ecc_volatile_uncorrected", api::kMemoryErrorUncorrected, api::kVolatileEcc,
             r_.ecc_volatile_uncorrected);
    read_ecc("ecc_aggregate_corrected", api::kMemoryErrorCorrected, api::kAggregateEcc,
             r_.ecc_aggregate_corrected);
    read_ecc("ecc_aggregate_uncorrected", api::kMemoryErrorUncorrected, api::kAggregateEcc,
             r_.ecc_aggregate_uncorrected);
    read_retired("retired_pages_sbe", api::kRetiredMultipleSingleBitEcc, r_.retired_pages_sbe);
    read_retired("retired_pages_dbe", api::kRetiredDoubleBitEcc, r_.retired_pages_dbe);
    int pending = 0;
    if (call("retired_pages_pending", a_.retired_pages_pending, &pending)) {
      r_.retired_pages_pending = pending != 0;
    }
    unsigned correctable = 0, uncorrectable = 0, remap_pending = 0, failed = 0;
    if (call("remapped_rows", a_.remapped_rows, &correctable, &uncorrectable, &remap_pending,
             &failed)) {
      r_.remapped_rows_correctable = correctable;
      r_.remapped_rows_uncorrectable = uncorrectable;
      r_.row_remap_pending = remap_pending != 0;
      r_.row_remap_failed = failed != 0;
    }
  }

  void pcie() {
    read_unsigned("pcie_gen", a_.pcie_gen, r_.pcie_gen);
    read_unsigned("pcie_gen_max", a_.pcie_gen_max, r_.pcie_gen_max);
    read_unsigned("pcie_width", a_.pcie_width, r_.pcie_width);
    read_unsigned("pcie_width_max", a_.pcie_width_max, r_.pcie_width_max);
  }

  // Links 0.. until NVML says the GPU has no such link (not supported or invalid argument).
  void nvlinks() {
    if (a_.nvlink_state == nullptr) return;
    for (unsigned link = 0; link < api::kNvLinkMaxLinks; ++link) {
      int state = 0;
      const api::Return rc = a_.nvlink_state(device_, link, &state);
      if (rc == api::kErrorNotSupported || rc == api::kErrorInvalidArgument) break;
      if (rc != api::kSuccess) {
        r_.unread.push_back("nvlink " + std::to_string(link) + ": " + a_.error(rc));
        continue;
      }
      NvLinkReading l;
      l.link = static_cast<int>(link);
      l.active = state != 0;
      read_nvlink_counter(link, api::kNvLinkErrorReplay, l.replay);
      read_nvlink_counter(link, api::kNvLinkErrorRecovery, l.recovery);
      read_nvlink_counter(link, api::kNvLinkErrorCrcFlit, l.crc_flit);
      read_nvlink_counter(link, api::kNvLinkErrorCrcData, l.crc_data);
      r_.nvlinks.push_back(l);
    }
  }

 private:
  void read_kind(const char* field, api::DeviceKindUnsignedFn fn, int kind,
                 std::optional<unsigned>& out) {
    unsigned value = 0;
    if (call(field, fn, kind, &value)) out = value;
  }
  void read_unsigned(const char* field, api::DeviceUnsignedFn fn, std::optional<unsigned>& out) {
    unsigned value = 0;
    if (call(field, fn, &value)) out = value;
  }
  void read_milliwatts(const char* field, api::DeviceUnsignedFn fn, std::optional<double>& out) {
    unsigned milliwatts = 0;
    if (call(field, fn, &milliwatts)) out = milliwatts / 1000.0;
  }
  void read_ecc(const char* field, int error_type, int counter, std::optional<uint64_t>& out) {
    unsigned long long value = 0;
    if (call(field, a_.ecc_errors, error_type, counter, &value)) out = value;
  }
  // The count alone: a zero-sized buffer makes NVML return the count, with success when there
  // are none and "insufficient size" otherwise.
  void read_retired(const char* field, int cause, std::optional<unsigned>& out) {
    if (a_.retired_pages == nullptr) return;
    unsigned count = 0;
    unsigned long long address = 0;  // never written with count 0; NVML rejects a null buffer
    const api::Return rc = a_.retired_pages(device_, cause, &count, &address);
    if (rc == api::kSuccess || rc == api::kErrorInsufficientSize) {
      out = count;
    } else if (rc != api::kErrorNotSupported) {
      r_.unread.push_back(std::string(field) + ": " + a_.error(rc));
    }
  }
  void read_nvlink_counter(unsigned link, int counter, std::optional<uint64_t>& out) {
    if (a_.nvlink_error == nullptr) return;
    unsigned long long value = 0;
    if (a_.nvlink_error(device_, link, counter, &value) == api::kSuccess) out = value;
  }

  const Nvml::Api& a_;
  api::Device device_;
  GpuReading& r_;
};

}  // namespace

std::string default_nvml_library() {
  const char* library = std::getenv("MS_NVML_LIBRARY");
  return library != nullptr && *library != '\0' ? library : "libnvidia-ml.so.1";
}

Nvml::Nvml(void* handle, std::unique_ptr<Api> api) : handle_(handle), api_(std::move(api)) {}

Nvml::~Nvml() {
  if (api_->shutdown) api_->shutdown();
  dlclose(handle_);
}

Result<std::unique_ptr<Nvml>> Nvml::open(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return Unavailable("NVML not available: " + std::string(why ? why : library) +
                       " (no NVIDIA driver on this machine)");
  }
  auto a = std::make_unique<Api>();
  resolve_all(handle, *a);
  if (!a->init || !a->shutdown || !a->device_count || !a->handle_by_index) {
    dlclose(handle);
    return Unavailable("NVML not available: " + library +
                       " lacks nvmlInit/nvmlDeviceGetCount/nvmlDeviceGetHandleByIndex");
  }
  if (const api::Return rc = a->init(); rc != api::kSuccess) {
    const std::string why = a->error(rc);
    dlclose(handle);
    return Unavailable("NVML not available: nvmlInit failed: " + why);
  }
  return std::unique_ptr<Nvml>(new Nvml(handle, std::move(a)));
}

Result<int> Nvml::device_count() {
  unsigned count = 0;
  if (const api::Return rc = api_->device_count(&count); rc != api::kSuccess) {
    return Unavailable("nvmlDeviceGetCount failed: " + api_->error(rc));
  }
  return static_cast<int>(count);
}

Result<GpuReading> Nvml::read(int index) {
  api::Device device = nullptr;
  if (const api::Return rc = api_->handle_by_index(static_cast<unsigned>(index), &device);
      rc != api::kSuccess) {
    return Unavailable("GPU " + std::to_string(index) +
                       ": nvmlDeviceGetHandleByIndex failed: " + api_->error(rc));
  }
  GpuReading r;
  r.index = index;
  char version[api::kSystemDriverVersionBufferSize] = {0};
  if (api_->driver_version && api_->driver_version(version, sizeof(version)) == api::kSuccess) {
    r.driver_version = version;
  }
  int cuda = 0;
  if (api_->cuda_driver_version && api_->cuda_driver_version(&cuda) == api::kSuccess) {
    r.cuda_driver_version = cuda;
  }
  DeviceReader reader(*api_, device, r);
  reader.strings();
  reader.memory_and_compute();
  reader.clocks_power_temperature();
  reader.modes();
  reader.memory_errors();
  reader.pcie();
  reader.nvlinks();
  return r;
}

Result<std::vector<GpuReading>> read_all_gpus(const std::string& library,
                                              const std::string& sysfs_root) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<Nvml> nvml, Nvml::open(library));
  MS_ASSIGN_OR_RETURN(int count, nvml->device_count());
  std::vector<GpuReading> readings;
  for (int i = 0; i < count; ++i) {
    Result<GpuReading> read = nvml->read(i);
    if (!read.ok()) {
      // A GPU the driver lost is the finding itself; the others are still read.
      GpuReading lost;
      lost.index = i;
      lost.lost = read.status().message();
      readings.push_back(std::move(lost));
      continue;
    }
    GpuReading r = std::move(*read);
    const GpuTopology topology = gpu_topology(r.bus_id, sysfs_root);
    r.numa_node = topology.numa_node;
    r.nearest_nic = topology.nearest_nic;
    readings.push_back(std::move(r));
  }
  return readings;
}

}  // namespace ms::diag
