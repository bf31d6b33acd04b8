// GPU discovery, device memory and copies through the CUDA runtime API. No CUDA types appear
// here, so CPU-only code (cmd/, diag/) can include it. The runtime loads the driver lazily:
// binaries linked against kernels/ start on machines without a GPU or driver, and the first
// call here answers kUnavailable with the reason instead of crashing.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace ms::kernels {

// An opaque cudaStream_t; nullptr is the default stream. Every entry point in kernels/ only
// enqueues work on it: results are ready after synchronize(stream).
using Stream = void*;

// Number of visible CUDA devices. kUnavailable, with the runtime's reason and what to do, when
// there is no device or no usable driver (this is how callers decide to skip GPU work).
Result<int> device_count();
// The marketing name of `device` ("NVIDIA H200"); InvalidArgument when there is no such device.
Result<std::string> device_name(int device);
// The PCI address of `device` as the CUDA runtime gives it ("0000:18:00.0"), to find the same
// GPU among NVML's, whose order may differ from CUDA's.
Result<std::string> device_pci_bus_id(int device);
// Makes `device` current for this host thread.
Status set_device(int device);

// Device memory on the current device. device_alloc(0) returns nullptr; device_free(nullptr) is
// a no-op. Copies are synchronous; `bytes` of 0 copies nothing.
Result<void*> device_alloc(size_t bytes);
Status device_free(void* ptr);
Status copy_to_device(void* device_dst, const void* host_src, size_t bytes);
Status copy_to_host(void* host_dst, const void* device_src, size_t bytes);
// Enqueues a copy between two device buffers of the current device on `stream`.
Status copy_on_device(void* device_dst, const void* device_src, size_t bytes,
                      Stream stream = nullptr);
// Waits for all work enqueued on `stream`; reports errors of earlier asynchronous launches.
Status synchronize(Stream stream);

// Owns one device allocation; freed when the buffer is destroyed. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  DeviceBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  void release();

  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace ms::kernels
