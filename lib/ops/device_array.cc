// A growable f32 array in a backend's device memory (ops/device_array.h).
#include "ops/device_array.h"

#include <cassert>
#include <new>
#include <string>
#include <utility>

#include "core/device_runtime.h"

namespace ms::ops {

float* DeviceArray::resize(Backend& be, size_t n) {
  const size_t kept = std::min(size_, n);
  if (n > capacity()) {
    Result<Tensor> grown = empty_tensor(be.runtime().allocator(), DType::kF32,
                                        {static_cast<int64_t>(n)}, be.stream());
    if (!grown.ok()) {
      throw DeviceOutOfMemory(grown.status().message() + " (a device array growing to " +
                              std::to_string(n) + " floats, " +
                              std::to_string(n * sizeof(float) / (1 << 20)) + " MiB)");
    }
    if (kept > 0) be.copy(storage_.data<float>(), grown->data<float>(), static_cast<int64_t>(kept));
    storage_ = std::move(*grown);
  }
  if (n > kept) be.fill(storage_.data<float>() + kept, static_cast<int64_t>(n - kept), 0.0f);
  size_ = n;
  return data();
}

float* DeviceArray::zeroed(Backend& be, size_t n) {
  size_ = 0;  // nothing kept: resize zeroes all n
  return resize(be, n);
}

void DeviceArray::assign(Backend& be, const float* src, size_t n) {
  size_ = 0;
  if (n > capacity()) resize(be, n);
  size_ = n;
  if (n > 0) be.copy(src, storage_.data<float>(), static_cast<int64_t>(n));
}

namespace {

// n f32 elements at `data` on `device`, as a tensor the runtime's copy takes.
Tensor flat_view(const float* data, size_t n, Device device) {
  return Tensor::view_of(DType::kF32, {static_cast<int64_t>(n)}, const_cast<float*>(data),
                         device);
}

}  // namespace

Status DeviceArray::read(Backend& be, size_t offset, std::span<float> dst) const {
  assert(offset + dst.size() <= size_);
  if (dst.empty()) return Status::OK();
  Tensor to = flat_view(dst.data(), dst.size(), Device::host());
  const Tensor from = flat_view(data() + offset, dst.size(), device());
  MS_RETURN_IF_ERROR(be.runtime().copy(to, from, be.stream()));
  return be.runtime().synchronize(be.stream());
}

Status DeviceArray::write(Backend& be, size_t offset, std::span<const float> src) {
  assert(offset + src.size() <= size_);
  if (src.empty()) return Status::OK();
  Tensor to = flat_view(data() + offset, src.size(), device());
  const Tensor from = flat_view(src.data(), src.size(), Device::host());
  MS_RETURN_IF_ERROR(be.runtime().copy(to, from, be.stream()));
  return be.runtime().synchronize(be.stream());
}

void DeviceArray::swap(DeviceArray& other) noexcept {
  std::swap(storage_, other.storage_);
  std::swap(size_, other.size_);
}

}  // namespace ms::ops
