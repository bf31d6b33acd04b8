// Host-side wrappers over the CUDA runtime (compiled by the C++ compiler, not nvcc): each checks
// its call with MS_CUDA_CHECK so failures carry the call text, location, host and rank.
#include "kernels/device.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "core/cuda_check.h"
#include "core/vendor_check.h"

namespace ms::kernels {

Result<int> device_count() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // Clear the error so later runtime calls do not report it again.
    (void)cudaGetLastError();
    std::string detail = cudaGetErrorName(err);
    detail += ": ";
    detail += cudaGetErrorString(err);
    detail += " (GPU work needs an NVIDIA GPU with its driver; CPU paths run without one)";
    return vendor_error("CUDA", "cudaGetDeviceCount(&count)", detail, __FILE__, __LINE__,
                        StatusCode::kUnavailable);
  }
  if (count == 0) return Unavailable("the CUDA runtime reports 0 devices on this machine");
  return count;
}

Result<std::string> device_name(int device) {
  MS_ASSIGN_OR_RETURN(const int count, device_count());
  if (device < 0 || device >= count) {
    return InvalidArgument("CUDA device " + std::to_string(device) +
                           " does not exist: " + std::to_string(count) + " device(s) are visible");
  }
  cudaDeviceProp properties{};
  MS_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return std::string(properties.name);
}

Result<std::string> device_pci_bus_id(int device) {
  char bus_id[32] = {0};
  MS_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device));
  return std::string(bus_id);
}

Status set_device(int device) {
  MS_CUDA_CHECK(cudaSetDevice(device));
  return Status::OK();
}

Result<void*> device_alloc(size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  void* ptr = nullptr;
  MS_CUDA_CHECK(cudaMalloc(&ptr, bytes));
  return ptr;
}

Status device_free(void* ptr) {
  if (ptr == nullptr) return Status::OK();
  MS_CUDA_CHECK(cudaFree(ptr));
  return Status::OK();
}

Status copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return Status::OK();
  MS_CUDA_CHECK(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice));
  return Status::OK();
}

Status copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return Status::OK();
  MS_CUDA_CHECK(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost));
  return Status::OK();
}

Status copy_on_device(void* device_dst, const void* device_src, size_t bytes, Stream stream) {
  if (bytes == 0) return Status::OK();
  MS_CUDA_CHECK(cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice,
                                static_cast<cudaStream_t>(stream)));
  return Status::OK();
}

Status synchronize(Stream stream) {
  MS_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  return Status::OK();
}

Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  MS_ASSIGN_OR_RETURN(void* ptr, device_alloc(bytes));
  return DeviceBuffer(ptr, bytes);
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// A destructor has no caller to report to: a failed free leaves a sticky CUDA error that the
// next checked call reports.
void DeviceBuffer::release() {
  if (data_ != nullptr) (void)device_free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace ms::kernels
