#include "core/tensor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

namespace ms {

std::string shape_string(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

int64_t shape_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    assert(d >= 0 && "tensor dimensions must be non-negative");
    n *= d;
  }
  return n;
}

Tensor Tensor::empty(DType dtype, std::vector<int64_t> shape) {
  Buffer buffer(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  void* data = buffer.data();
  return Tensor(dtype, std::move(shape), std::move(buffer), data, Device::host(), true);
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t = empty(dtype, std::move(shape));
  if (t.nbytes()) std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::from_buffer(DType dtype, std::vector<int64_t> shape, Buffer buffer) {
  assert(buffer.size() == static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  void* data = buffer.data();
  const Device device = buffer.device();
  return Tensor(dtype, std::move(shape), std::move(buffer), data, device, true);
}

Tensor Tensor::view_of(DType dtype, std::vector<int64_t> shape, void* data, Device device) {
  assert((data != nullptr || shape_numel(shape) == 0) && "a view needs memory to look at");
  return Tensor(dtype, std::move(shape), Buffer(), data, device, false);
}

Tensor Tensor::clone() const {
  assert(is_host() && "Tensor::clone copies host memory; use the device's runtime");
  Tensor t = empty(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype_)) + shape_string(shape_);
}

namespace {

template <typename T>
constexpr bool kIsFloatElement =
    std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

template <typename T>
float to_float(T x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, bf16>) return bf16_to_float(x.bits);
  else return f16_to_float(x.bits);
}

template <typename T>
T from_float(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, bf16>) return bf16{float_to_bf16(x)};
  else return f16{float_to_f16(x)};
}

template <typename Src>
std::string value_text(Src x) {
  if constexpr (kIsFloatElement<Src>) return std::to_string(to_float(x));
  else return std::to_string(x);
}

template <typename Src, typename Dst>
Status does_not_fit(int64_t index, Src value) {
  return OutOfRange("convert " + std::string(dtype_name(dtype_of<Src>())) + " -> " +
                    std::string(dtype_name(dtype_of<Dst>())) + ": element " +
                    std::to_string(index) + " (value " + value_text(value) + ") does not fit in " +
                    std::string(dtype_name(dtype_of<Dst>())));
}

// A float is representable in integer type Dst when it is a whole number in
// [min(Dst), max(Dst) + 1); both bounds are powers of two, so they are exact in double.
template <typename Dst>
bool float_fits_integer(float x) {
  if (!std::isfinite(x) || std::trunc(x) != x) return false;
  const double upper = std::ldexp(1.0, std::numeric_limits<Dst>::digits);
  const double lower = std::is_signed_v<Dst> ? -upper : 0.0;
  return x >= lower && x < upper;
}

// Converts one element; returns false when the value does not fit in Dst.
template <typename Src, typename Dst>
bool convert_element(Src in, Dst& out) {
  if constexpr (kIsFloatElement<Src> && kIsFloatElement<Dst>) {
    out = from_float<Dst>(to_float(in));
    return true;
  } else if constexpr (kIsFloatElement<Src>) {
    const float x = to_float(in);
    if (!float_fits_integer<Dst>(x)) return false;
    out = static_cast<Dst>(x);
    return true;
  } else if constexpr (kIsFloatElement<Dst>) {
    out = from_float<Dst>(static_cast<float>(in));
    return std::isfinite(to_float(out));
  } else {
    if (!std::in_range<Dst>(in)) return false;
    out = static_cast<Dst>(in);
    return true;
  }
}

template <typename Src, typename Dst>
Status convert_elements(const Src* in, Dst* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!convert_element(in[i], out[i])) return does_not_fit<Src, Dst>(i, in[i]);
  }
  return Status::OK();
}

}  // namespace

Result<Tensor> convert(const Tensor& input, DType to) {
  if (!input.is_host()) {
    return FailedPrecondition("convert " + input.describe() + " to " + std::string(dtype_name(to)) +
                              ": the tensor is on " + device_name(input.device()) +
                              ", and convert reads host memory");
  }
  if (input.dtype() == to) return input.clone();
  Tensor output = Tensor::empty(to, input.shape());
  Status status = visit_dtype(input.dtype(), [&](auto src_tag) {
    using Src = typename decltype(src_tag)::type;
    return visit_dtype(to, [&](auto dst_tag) {
      using Dst = typename decltype(dst_tag)::type;
      return convert_elements(input.data<Src>(), output.data<Dst>(), input.numel());
    });
  });
  if (!status.ok()) return status;
  return output;
}

}  // namespace ms
