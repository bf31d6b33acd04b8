// A growable f32 array in a backend's device memory: the model's activations and scratch, and
// the work buffers of lib/parallel's exchanges, reused from step to step so that steady state
// allocates nothing. Its storage is a Tensor from the backend's allocator on the backend's
// stream (core/device_runtime.h); growing copies the kept elements and zeroes the new ones
// through the backend, so nothing here touches the memory from the host and the same code
// holds host or CUDA memory.
//
// An array serves one backend (its owner's) for its whole life, so resizing never asks the
// backend which device it is on: sizing runs many times per layer.
//
// resize keeps the first min(old, new) elements and makes the new ones zero (as std::vector
// does); shrinking keeps the allocation, so a buffer sized for the largest micro-batch is
// reused by smaller ones. An allocation the device cannot serve throws DeviceOutOfMemory
// (core/device_runtime.h: a std::bad_alloc, as std::vector throws, whose message names the
// device and the sizes; the tools print it with the subcommand's name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "core/status.h"
#include "core/tensor.h"
#include "ops/backend.h"

namespace ms::ops {

class DeviceArray {
 public:
  DeviceArray() = default;
  // A moved-from array is empty.
  DeviceArray(DeviceArray&& other) noexcept { swap(other); }
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    DeviceArray taken(std::move(other));
    swap(taken);
    return *this;
  }
  // Copies allocate; spell them out (copy_from) so a hot path never copies by accident.
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  float* data() { return size_ == 0 ? nullptr : storage_.data<float>(); }
  const float* data() const { return size_ == 0 ? nullptr : storage_.data<float>(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Device device() const { return storage_.device(); }

  // n elements on be's device, as described above. Returns data().
  float* resize(Backend& be, size_t n);
  // n elements, all zero. Returns data().
  float* zeroed(Backend& be, size_t n);
  // A copy of n elements at src (on be's device).
  void assign(Backend& be, const float* src, size_t n);
  // The host's side of the array: dst.size() elements from `offset` copied to host memory, or
  // src copied in at `offset`, each finished when it returns (a device backend synchronizes
  // its stream). For the values a caller reads or supplies (logits, losses, checkpoints), never
  // for work between ops. The range must lie inside size() (asserted).
  Status read(Backend& be, size_t offset, std::span<float> dst) const;
  Status write(Backend& be, size_t offset, std::span<const float> src);
  void swap(DeviceArray& other) noexcept;

 private:
  Tensor storage_;   // capacity elements, from the backend's allocator
  size_t size_ = 0;  // elements in use
  size_t capacity() const { return static_cast<size_t>(storage_.numel()); }
};

}  // namespace ms::ops
