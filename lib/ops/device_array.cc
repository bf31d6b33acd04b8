// A growable f32 array in a backend's device memory (ops/device_array.h).
#include "ops/device_array.h"

#include <new>
#include <utility>

#include "core/device_runtime.h"

namespace ms::ops {

float* DeviceArray::resize(Backend& be, size_t n) {
  const size_t kept = std::min(size_, n);
  if (n > capacity()) {
    Result<Tensor> grown = empty_tensor(be.runtime().allocator(), DType::kF32,
                                        {static_cast<int64_t>(n)}, be.stream());
    if (!grown.ok()) throw std::bad_alloc();
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

void DeviceArray::swap(DeviceArray& other) noexcept {
  std::swap(storage_, other.storage_);
  std::swap(size_, other.size_);
}

}  // namespace ms::ops
