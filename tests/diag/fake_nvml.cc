// A stand-in for the driver's libnvidia-ml.so.1, loaded by nvml_test.cc through Nvml::open, so
// the dlopen/dlsym path and the field reading are tested on machines without a driver. It
// exports part of NVML's entry points under their real names with the signatures of
// lib/diag/nvml_api.h: two GPUs, where GPU 0 answers with fixed values (some queries "not
// supported", one "no permission") and GPU 1 is lost, as after an Xid 79.
// It checks the reader against our own declarations, not NVIDIA's header; the GPU script
// (scripts/bench/gpu_diagnose.sh) compares the real thing with nvidia-smi -q.
#include <cstring>

#include "diag/nvml_api.h"

namespace api = ms::diag::nvml_api;

namespace {
constexpr api::Return kNoPermission = 4;
constexpr api::Return kGpuIsLost = 15;
api::DeviceSt* const kGpu0 = reinterpret_cast<api::DeviceSt*>(0x1000);
int g_initialised = 0;

void copy(char* out, unsigned length, const char* text) {
  std::strncpy(out, text, length - 1);
  out[length - 1] = '\0';
}
}  // namespace

extern "C" {

api::Return nvmlInit_v2() {
  ++g_initialised;
  return api::kSuccess;
}
api::Return nvmlShutdown() {
  --g_initialised;
  return api::kSuccess;
}
const char* nvmlErrorString(api::Return rc) {
  switch (rc) {
    case kNoPermission: return "Insufficient Permissions";
    case kGpuIsLost: return "GPU is lost";
    default: return "Unknown Error";
  }
}
api::Return nvmlSystemGetDriverVersion(char* out, unsigned length) {
  copy(out, length, "550.54.15");
  return api::kSuccess;
}
api::Return nvmlSystemGetCudaDriverVersion_v2(int* version) {
  *version = 12040;
  return api::kSuccess;
}
api::Return nvmlDeviceGetCount_v2(unsigned* count) {
  *count = 2;
  return api::kSuccess;
}
api::Return nvmlDeviceGetHandleByIndex_v2(unsigned index, api::Device* device) {
  if (index == 1) return kGpuIsLost;
  if (index != 0) return api::kErrorInvalidArgument;
  *device = kGpu0;
  return api::kSuccess;
}
api::Return nvmlDeviceGetName(api::Device, char* out, unsigned length) {
  copy(out, length, "Fake GPU");
  return api::kSuccess;
}
api::Return nvmlDeviceGetPciInfo_v3(api::Device, api::PciInfo* pci) {
  std::memset(pci, 0, sizeof(*pci));
  std::strcpy(pci->bus_id, "00000000:18:00.0");
  return api::kSuccess;
}
api::Return nvmlDeviceGetMemoryInfo(api::Device, api::Memory* memory) {
  memory->total = 80ull << 30;
  memory->used = 1ull << 30;
  memory->free = memory->total - memory->used;
  return api::kSuccess;
}
api::Return nvmlDeviceGetCudaComputeCapability(api::Device, int* major, int* minor) {
  *major = 9;
  *minor = 0;
  return api::kSuccess;
}
api::Return nvmlDeviceGetClockInfo(api::Device, int type, unsigned* mhz) {
  *mhz = type == api::kClockSm ? 1755 : 2619;
  return api::kSuccess;
}
api::Return nvmlDeviceGetMaxClockInfo(api::Device, int type, unsigned* mhz) {
  *mhz = type == api::kClockSm ? 1980 : 2619;
  return api::kSuccess;
}
api::Return nvmlDeviceGetPowerUsage(api::Device, unsigned* milliwatts) {
  *milliwatts = 650500;
  return api::kSuccess;
}
api::Return nvmlDeviceGetEnforcedPowerLimit(api::Device, unsigned* milliwatts) {
  *milliwatts = 700000;
  return api::kSuccess;
}
api::Return nvmlDeviceGetPowerManagementDefaultLimit(api::Device, unsigned*) {
  return kNoPermission;
}
api::Return nvmlDeviceGetTemperature(api::Device, int, unsigned* celsius) {
  *celsius = 91;
  return api::kSuccess;
}
api::Return nvmlDeviceGetTemperatureThreshold(api::Device, int kind, unsigned* celsius) {
  *celsius = kind == api::kTemperatureThresholdSlowdown ? 87 : 92;
  return api::kSuccess;
}
api::Return nvmlDeviceGetEccMode(api::Device, int* current, int* pending) {
  *current = 1;
  *pending = 1;
  return api::kSuccess;
}
api::Return nvmlDeviceGetMigMode(api::Device, unsigned*, unsigned*) { return api::kErrorNotSupported; }
api::Return nvmlDeviceGetTotalEccErrors(api::Device, int error_type, int counter,
                                        unsigned long long* count) {
  // 3 uncorrectable errors since the driver loaded, 5 over the GPU's life; 10x as many corrected.
  const unsigned long long uncorrected = counter == api::kVolatileEcc ? 3 : 5;
  *count = error_type == api::kMemoryErrorUncorrected ? uncorrected : 10 * uncorrected;
  return api::kSuccess;
}
api::Return nvmlDeviceGetRetiredPages(api::Device, int, unsigned*, unsigned long long*) {
  return api::kErrorNotSupported;
}
api::Return nvmlDeviceGetRemappedRows(api::Device, unsigned* correctable, unsigned* uncorrectable,
                                      unsigned* pending, unsigned* failed) {
  *correctable = 0;
  *uncorrectable = 1;
  *pending = 1;
  *failed = 0;
  return api::kSuccess;
}
api::Return nvmlDeviceGetCurrentClocksEventReasons(api::Device, unsigned long long* reasons) {
  *reasons = api::kClocksSwPowerCap | api::kClocksHwSlowdown | api::kClocksHwThermalSlowdown;
  return api::kSuccess;
}
api::Return nvmlDeviceGetCurrPcieLinkGeneration(api::Device, unsigned* gen) {
  *gen = 5;
  return api::kSuccess;
}
api::Return nvmlDeviceGetMaxPcieLinkGeneration(api::Device, unsigned* gen) {
  *gen = 5;
  return api::kSuccess;
}
api::Return nvmlDeviceGetCurrPcieLinkWidth(api::Device, unsigned* width) {
  *width = 8;
  return api::kSuccess;
}
api::Return nvmlDeviceGetMaxPcieLinkWidth(api::Device, unsigned* width) {
  *width = 16;
  return api::kSuccess;
}
// Four links, link 2 down; link 1 has CRC errors.
api::Return nvmlDeviceGetNvLinkState(api::Device, unsigned link, int* active) {
  if (link >= 4) return api::kErrorInvalidArgument;
  *active = link == 2 ? 0 : 1;
  return api::kSuccess;
}
api::Return nvmlDeviceGetNvLinkErrorCounter(api::Device, unsigned link, int counter,
                                            unsigned long long* count) {
  *count = (link == 1 && counter == api::kNvLinkErrorCrcFlit) ? 250 : 0;
  return api::kSuccess;
}

// Not NVML: lets the test see that Nvml's destructor shut NVML down.
int fake_nvml_initialised() { return g_initialised; }

}  // extern "C"
