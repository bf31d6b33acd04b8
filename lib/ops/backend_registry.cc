#include "ops/backend_registry.h"

#include <mutex>
#include <string>

namespace ms::ops {
namespace {

std::mutex registry_mutex;
DeviceBackends cuda_backends;

}  // namespace

void register_cuda_backends(const DeviceBackends& cuda) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  cuda_backends = cuda;
}

Result<Backend*> backend_for(Device device, MatmulPrecision precision) {
  if (device.is_host()) return &cpu_backend(precision);
  DeviceBackends cuda;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    cuda = cuda_backends;
  }
  if (cuda.open == nullptr) {
    return Unavailable(device_name(device) +
                       " needs a build with CUDA, and this one has none (kernels/ was not "
                       "built: configure with -DMS_CUDA=ON on a machine with nvcc)");
  }
  return cuda.open(device, precision);
}

DeviceMemory device_memory(Device device) {
  if (device.is_host()) return {};
  std::lock_guard<std::mutex> lock(registry_mutex);
  return cuda_backends.memory != nullptr ? cuda_backends.memory(device) : DeviceMemory{};
}

std::string describe_device(Device device) {
  if (device.is_host()) return "cpu";
  std::lock_guard<std::mutex> lock(registry_mutex);
  return cuda_backends.describe != nullptr ? cuda_backends.describe(device) : device_name(device);
}

Result<DeviceRates> device_rates(Device device) {
  Result<DeviceRates> (*rates)(Device) = nullptr;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    rates = cuda_backends.rates;
  }
  if (device.is_host() || rates == nullptr) {
    return Unavailable("no device rates for " + device_name(device));
  }
  return rates(device);
}

}  // namespace ms::ops
