// Which backend runs a device: the host's is lib/ops (cpu_backend()); a CUDA build registers
// its backend at start (kernels/cuda_backend.h register_cuda_backend, called by the tools'
// main), so lib/ and the tools choose a device by name without linking CUDA themselves.
#pragma once

#include <cstddef>
#include <string>

#include "core/device.h"
#include "core/status.h"
#include "ops/backend.h"

namespace ms::ops {

// Device memory now, at the most since start, and reserved (the arena), in bytes.
struct DeviceMemory {
  size_t in_use = 0;
  size_t peak = 0;
  size_t capacity = 0;
};

// A device's GEMM rates in GFLOP/s, the MFU yardsticks: per precision, the dense peak
// (architecture table x SMs x clock; 0 for an architecture the table lacks) and a measured
// cuBLASLt rate (sgemm; bf16 inputs with fp32 accumulation on the tensor cores).
struct DeviceRates {
  double peak_gflops = 0;
  double measured_gflops = 0;
  double bf16_peak_gflops = 0;
  double bf16_measured_gflops = 0;
};

// What a device kind provides: its backend for a device (made once and kept for the process's
// life), its memory use, and a line describing it ("NVIDIA H100 80GB HBM3 (cuda:0, sm_90,
// 79.1 GiB)").
struct DeviceBackends {
  Result<Backend*> (*open)(Device device, MatmulPrecision precision) = nullptr;
  DeviceMemory (*memory)(Device device) = nullptr;
  std::string (*describe)(Device device) = nullptr;
  Result<DeviceRates> (*rates)(Device device) = nullptr;
};

void register_cuda_backends(const DeviceBackends& cuda);

// The backend of `device` whose matmul-class ops read `precision` (ops/backend.h):
// cpu_backend(precision) for the host; for cuda:N the registered CUDA backend (the device
// runtime and its arena are set up on the first call and shared by both precisions).
// kUnavailable naming what is missing: a build without CUDA, no usable GPU or driver, no device
// of that ordinal.
Result<Backend*> backend_for(Device device, MatmulPrecision precision = MatmulPrecision::kF32);
// The device's memory use (zeros for the host, whose memory the host samples report).
DeviceMemory device_memory(Device device);
// "cpu" for the host; the registered description for a device.
std::string describe_device(Device device);
// The device's GEMM rates (backend_for(device) first). Unavailable for the host, whose rate
// ops/sgemm_rate.h measures.
Result<DeviceRates> device_rates(Device device);

}  // namespace ms::ops
