// Tensor: a dtype, a shape and contiguous row-major storage, either owned (a Buffer) or a
// non-owning view of memory someone else keeps alive (a shard inside a larger buffer, a
// memory-mapped file). Move-only like its Buffer; clone() makes an owning deep copy.
// Element access is typed: data<T>() asserts that T is the tensor's dtype, where bf16 and f16
// elements are the ms::bf16 / ms::f16 bit containers from core/half.h.
// A tensor knows its device (core/device.h): its storage came from that device's allocator
// (core/device_runtime.h), or a view says where the memory it looks at lives. data<T>() of a
// device tensor is a device address, for the kernels of that device; the element-wise helpers
// here (fill, clone, convert) read and write memory, so they take host tensors only.
#pragma once

#include <cassert>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/status.h"

namespace ms {

// The C++ element type stored for each dtype.
template <typename T>
inline constexpr bool kIsElementType =
    std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, f16> ||
    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> || std::is_same_v<T, uint16_t> ||
    std::is_same_v<T, uint8_t>;

template <typename T>
constexpr DType dtype_of() {
  static_assert(kIsElementType<T>, "not a tensor element type");
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  else if constexpr (std::is_same_v<T, bf16>) return DType::kBF16;
  else if constexpr (std::is_same_v<T, f16>) return DType::kF16;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::kI32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::kI64;
  else if constexpr (std::is_same_v<T, uint16_t>) return DType::kU16;
  else return DType::kU8;
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with T the element type of `dtype`; returns what fn returns.
template <typename Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(TypeTag<float>{});
    case DType::kBF16: return fn(TypeTag<bf16>{});
    case DType::kF16: return fn(TypeTag<f16>{});
    case DType::kI32: return fn(TypeTag<int32_t>{});
    case DType::kI64: return fn(TypeTag<int64_t>{});
    case DType::kU16: return fn(TypeTag<uint16_t>{});
    case DType::kU8: break;
  }
  return fn(TypeTag<uint8_t>{});
}

// "[2, 3, 4]"; "[]" for a scalar.
std::string shape_string(std::span<const int64_t> shape);
// Product of the dimensions (1 for a scalar). Dimensions must be non-negative (asserted).
int64_t shape_numel(std::span<const int64_t> shape);

class Tensor {
 public:
  // An empty f32 tensor of shape [0] with no storage.
  Tensor() : shape_{0} {}

  // Owning tensor with uninitialized contents. Throws std::bad_alloc when memory runs out.
  static Tensor empty(DType dtype, std::vector<int64_t> shape);
  // Owning tensor with every byte zero (0 in every dtype).
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  // Owning tensor that takes `buffer` as its storage; the buffer must hold exactly the tensor's
  // bytes (asserted).
  static Tensor from_buffer(DType dtype, std::vector<int64_t> shape, Buffer buffer);
  // Non-owning view of `data`, which must hold numel * dtype_size bytes on `device` and outlive
  // the view.
  static Tensor view_of(DType dtype, std::vector<int64_t> shape, void* data,
                        Device device = Device::host());

  // A moved-from tensor is empty (shape [0], no data).
  Tensor(Tensor&& other) noexcept
      : dtype_(other.dtype_),
        shape_(std::exchange(other.shape_, {0})),
        buffer_(std::move(other.buffer_)),
        data_(std::exchange(other.data_, nullptr)),
        device_(std::exchange(other.device_, Device::host())),
        owned_(std::exchange(other.owned_, true)) {}
  Tensor& operator=(Tensor&& other) noexcept {
    if (this != &other) {
      dtype_ = other.dtype_;
      shape_ = std::exchange(other.shape_, {0});
      buffer_ = std::move(other.buffer_);
      data_ = std::exchange(other.data_, nullptr);
      device_ = std::exchange(other.device_, Device::host());
      owned_ = std::exchange(other.owned_, true);
    }
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  size_t ndim() const { return shape_.size(); }
  int64_t dim(size_t i) const {
    assert(i < shape_.size());
    return shape_[i];
  }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool owns_data() const { return owned_; }
  Device device() const { return device_; }
  bool is_host() const { return device_.is_host(); }

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }

  template <typename T>
  T* data() {
    assert(dtype_of<T>() == dtype_ && "Tensor::data<T>: T does not match the tensor's dtype");
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    assert(dtype_of<T>() == dtype_ && "Tensor::data<T>: T does not match the tensor's dtype");
    return static_cast<const T*>(data_);
  }
  template <typename T>
  std::span<T> span() {
    return {data<T>(), static_cast<size_t>(numel())};
  }
  template <typename T>
  std::span<const T> span() const {
    return {data<T>(), static_cast<size_t>(numel())};
  }

  // Sets every element to `value`; T must be the tensor's dtype and the tensor on the host
  // (asserted).
  template <typename T>
  void fill(T value) {
    assert(is_host() && "Tensor::fill writes host memory");
    for (T& x : span<T>()) x = value;
  }

  // Non-owning view of this tensor's whole storage, with the same dtype, shape and device.
  Tensor view() { return view_of(dtype_, shape_, data_, device_); }
  // Owning deep copy of a host tensor (asserted); a device's copies go through its runtime.
  Tensor clone() const;
  // "bf16[2, 3]"
  std::string describe() const;

 private:
  Tensor(DType dtype, std::vector<int64_t> shape, Buffer buffer, void* data, Device device,
         bool owned)
      : dtype_(dtype), shape_(std::move(shape)), buffer_(std::move(buffer)), data_(data),
        device_(device), owned_(owned) {}

  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  Buffer buffer_;
  void* data_ = nullptr;  // into buffer_, or external memory for a view
  Device device_;         // buffer_'s device, or the viewed memory's
  bool owned_ = true;
};

// Returns an owning tensor of dtype `to` with the same shape and each element converted:
//  - float -> float: through f32, bf16/f16 rounded to nearest even (overflow becomes inf, NaN
//    stays NaN), as core/half.h does;
//  - int -> int: exact; a value outside the target's range is an OutOfRange error;
//  - float -> int: the value must be a finite whole number within the target's range, otherwise
//    an OutOfRange error (a fractional value is a lossy conversion the caller must do itself);
//  - int -> float: rounded to nearest; a value beyond the target's finite range is OutOfRange.
// Errors name the element index, its value and the two dtypes. FailedPrecondition for a tensor
// that is not on the host.
Result<Tensor> convert(const Tensor& input, DType to);

}  // namespace ms
