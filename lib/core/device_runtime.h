// The device seam's runtime half: allocating a device's memory and ordering its work. Each
// device kind has one DeviceRuntime; the host's (host_runtime()) is here, a CUDA runtime
// implements the same interface in kernels/ (a caching arena, cudaStream_t, cudaEvent_t).
// Code above the seam (the model, the optimizer, serving) allocates and orders work only
// through this interface, so the same code runs on either device.
//
// Stream-ordered allocation: memory from allocate(bytes, stream) may be used by work on
// `stream` at once; freeing it (destroying the Buffer) makes it reusable by later work on that
// stream without a synchronisation, which is how a CUDA caching allocator avoids a device-wide
// sync per free. Memory used on another stream needs an event first (record / wait).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/device.h"
#include "core/status.h"
#include "core/tensor.h"

namespace ms {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // `bytes` of uninitialized memory on device(), usable by work on `stream` (a stream of
  // device()). kUnavailable naming the size when the device's memory is exhausted.
  virtual Result<Buffer> allocate(size_t bytes, const Stream& stream) = 0;
};

// What code that cannot return a Status (a growing array, as std::vector throws bad_alloc)
// throws when an allocator refuses: a bad_alloc whose what() is the allocator's message, which
// names the device, the size asked for, what is in use and the largest free block. The tools
// print it as it is.
class DeviceOutOfMemory final : public std::bad_alloc {
 public:
  explicit DeviceOutOfMemory(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual Device device() const = 0;
  virtual Allocator& allocator() = 0;
  // The stream work is issued on when the caller names none.
  virtual Stream default_stream() const = 0;
  // An event marking everything issued on `stream` so far.
  virtual Result<Event> record(const Stream& stream) = 0;
  // Work issued on `stream` after this call starts only once `event` has completed: the
  // hand-over of a tensor from the stream that wrote it to another that reads it.
  virtual Status wait(const Stream& stream, const Event& event) = 0;
  // Blocks the calling thread until everything issued on `stream` has completed, reporting the
  // errors of earlier asynchronous work.
  virtual Status synchronize(const Stream& stream) = 0;
  // Copies src's bytes into dst (same dtype and element count) on `stream`; either side may be
  // on the host or on this runtime's device. InvalidArgument for mismatched tensors or a tensor
  // on another device.
  virtual Status copy(Tensor& dst, const Tensor& src, const Stream& stream) = 0;
};

// The host: Buffer's allocator (64-byte aligned; huge pages where `pages` says so for
// buffers that are reused), work that completes when issued, and memcpy.
DeviceRuntime& host_runtime();

// An owning tensor of `shape` on the allocator's device, uninitialized, for work on `stream`.
Result<Tensor> empty_tensor(Allocator& allocator, DType dtype, std::vector<int64_t> shape,
                            const Stream& stream);

}  // namespace ms
