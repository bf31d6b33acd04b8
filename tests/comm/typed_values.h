// Helpers for the collective tests: write and read integers into buffers of any DType, and the
// value each rank contributes, chosen so sums, maxima and minima are exact in every dtype.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace ms::comm::testing {

template <typename T>
void put(uint8_t* bytes, T value) {
  std::memcpy(bytes, &value, sizeof(T));
}

template <typename T>
T get(const uint8_t* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

inline void store(DType dtype, void* buf, size_t i, int64_t v) {
  auto* bytes = static_cast<uint8_t*>(buf) + i * dtype_size(dtype);
  const auto f = static_cast<float>(v);
  switch (dtype) {
    case DType::kF32: put(bytes, f); break;
    case DType::kBF16: put(bytes, float_to_bf16(f)); break;
    case DType::kF16: put(bytes, float_to_f16(f)); break;
    case DType::kI32: put(bytes, static_cast<int32_t>(v)); break;
    case DType::kI64: put(bytes, v); break;
    case DType::kU16: put(bytes, static_cast<uint16_t>(v)); break;
    case DType::kU8: put(bytes, static_cast<uint8_t>(v)); break;
  }
}

inline int64_t load(DType dtype, const void* buf, size_t i) {
  const auto* bytes = static_cast<const uint8_t*>(buf) + i * dtype_size(dtype);
  switch (dtype) {
    case DType::kF32: return static_cast<int64_t>(get<float>(bytes));
    case DType::kBF16: return static_cast<int64_t>(bf16_to_float(get<uint16_t>(bytes)));
    case DType::kF16: return static_cast<int64_t>(f16_to_float(get<uint16_t>(bytes)));
    case DType::kI32: return get<int32_t>(bytes);
    case DType::kI64: return get<int64_t>(bytes);
    case DType::kU16: return get<uint16_t>(bytes);
    case DType::kU8: return get<uint8_t>(bytes);
  }
  return 0;
}

// Value rank `rank` holds at element i. Narrow types (bf16 and f16 are exact for integers up to
// 256 and 2048, u8 holds 255) get rank * 16 + i % 16, so a sum over four ranks stays <= 252;
// wide types get rank * 1000 + i. Signed types negate odd elements so max and min differ from
// the rank order.
inline int64_t value_of(DType dtype, int rank, size_t i) {
  const bool narrow = dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kU8;
  const int64_t magnitude =
      narrow ? rank * 16 + static_cast<int64_t>(i % 16) : rank * 1000 + static_cast<int64_t>(i);
  const bool is_unsigned = dtype == DType::kU8 || dtype == DType::kU16;
  return (!is_unsigned && i % 2 == 1) ? -magnitude : magnitude;
}

// A buffer of `count` elements with element i = value_of(dtype, rank, offset + i).
inline std::vector<uint8_t> filled(DType dtype, int rank, size_t count, size_t offset = 0) {
  std::vector<uint8_t> buf(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) store(dtype, buf.data(), i, value_of(dtype, rank, offset + i));
  return buf;
}

}  // namespace ms::comm::testing
