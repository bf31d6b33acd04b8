// The part of NVML's public C API (NVIDIA Management Library, docs.nvidia.com/deploy/nvml-api)
// that ms-diagnose reads, declared here rather than taken from nvml.h: NVML ships with the
// driver, not with the CUDA toolkit a build machine may have, and the toolkit loads it at run
// time with dlopen (diag/nvml.h), so no header or library of NVIDIA's is needed to build.
//
// Only types whose layout NVML documents are declared; enums are passed as int, which is their
// size in NVML's C ABI. Every function returns an nvmlReturn_t (0 is success).
#pragma once

#include <cstdint>

namespace ms::diag::nvml_api {

using Return = int;             // nvmlReturn_t
using Device = struct DeviceSt*;  // nvmlDevice_t: an opaque handle

// nvmlReturn_t values the reader tells apart.
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorInsufficientSize = 7;

// Buffer sizes NVML documents for its string queries.
inline constexpr unsigned kSystemDriverVersionBufferSize = 80;
inline constexpr unsigned kDeviceNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned kDeviceUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned kNvLinkMaxLinks = 18;        // NVML_NVLINK_MAX_LINKS

// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3.
struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;
  unsigned pci_subsystem_id;
  char bus_id[32];  // "00000000:18:00.0"
};

// NVML writes these whole: a size that differs from NVML's would corrupt the caller's stack.
static_assert(sizeof(PciInfo) == 16 + 5 * 4 + 32);

// nvmlMemory_t (bytes).
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
static_assert(sizeof(Memory) == 24);

// nvmlUtilization_t (percent over the driver's last sample period).
struct Utilization {
  unsigned gpu;
  unsigned memory;
};
static_assert(sizeof(Utilization) == 8);

// nvmlClockType_t
inline constexpr int kClockSm = 1;
inline constexpr int kClockMem = 2;
// nvmlTemperatureSensors_t / nvmlTemperatureThresholds_t
inline constexpr int kTemperatureGpu = 0;
inline constexpr int kTemperatureThresholdShutdown = 0;
inline constexpr int kTemperatureThresholdSlowdown = 1;
// nvmlMemoryErrorType_t / nvmlEccCounterType_t
inline constexpr int kMemoryErrorCorrected = 0;
inline constexpr int kMemoryErrorUncorrected = 1;
inline constexpr int kVolatileEcc = 0;
inline constexpr int kAggregateEcc = 1;
// nvmlPageRetirementCause_t
inline constexpr int kRetiredMultipleSingleBitEcc = 0;
inline constexpr int kRetiredDoubleBitEcc = 1;
// nvmlNvLinkErrorCounter_t
inline constexpr int kNvLinkErrorReplay = 0;
inline constexpr int kNvLinkErrorRecovery = 1;
inline constexpr int kNvLinkErrorCrcFlit = 2;
inline constexpr int kNvLinkErrorCrcData = 3;

// nvmlClocksEventReasons (formerly ClocksThrottleReasons) bits.
inline constexpr uint64_t kClocksGpuIdle = 0x1;
inline constexpr uint64_t kClocksApplicationsSetting = 0x2;
inline constexpr uint64_t kClocksSwPowerCap = 0x4;
inline constexpr uint64_t kClocksHwSlowdown = 0x8;
inline constexpr uint64_t kClocksSyncBoost = 0x10;
inline constexpr uint64_t kClocksSwThermalSlowdown = 0x20;
inline constexpr uint64_t kClocksHwThermalSlowdown = 0x40;
inline constexpr uint64_t kClocksHwPowerBrakeSlowdown = 0x80;
inline constexpr uint64_t kClocksDisplaySetting = 0x100;

// Function signatures, by NVML's exported names.
using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using CharBufferFn = Return (*)(char*, unsigned);                    // system driver version
using IntOutFn = Return (*)(int*);                                   // CUDA driver version
using UnsignedOutFn = Return (*)(unsigned*);                         // device count
using HandleByIndexFn = Return (*)(unsigned, Device*);
using DeviceStringFn = Return (*)(Device, char*, unsigned);          // name, UUID
using PciInfoFn = Return (*)(Device, PciInfo*);
using MemoryFn = Return (*)(Device, Memory*);
using UtilizationFn = Return (*)(Device, Utilization*);
using ComputeCapabilityFn = Return (*)(Device, int*, int*);
using DeviceKindUnsignedFn = Return (*)(Device, int, unsigned*);     // clocks, temperatures
using DeviceUnsignedFn = Return (*)(Device, unsigned*);              // power, PCIe
using DeviceUnsignedPairFn = Return (*)(Device, unsigned*, unsigned*);  // MIG mode
using DeviceEnablePairFn = Return (*)(Device, int*, int*);           // ECC mode
using DeviceEnableFn = Return (*)(Device, int*);                     // retirement pending
using EccErrorsFn = Return (*)(Device, int, int, unsigned long long*);
using RetiredPagesFn = Return (*)(Device, int, unsigned*, unsigned long long*);
using RemappedRowsFn = Return (*)(Device, unsigned*, unsigned*, unsigned*, unsigned*);
using DeviceU64Fn = Return (*)(Device, unsigned long long*);         // clock event reasons
using NvLinkStateFn = Return (*)(Device, unsigned, int*);
using NvLinkErrorFn = Return (*)(Device, unsigned, int, unsigned long long*);

}  // namespace ms::diag::nvml_api
