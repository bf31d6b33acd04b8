// Element types of tensors, buffers and collectives. The numeric codes are append-only: they are
// written into checkpoints and telemetry, so an existing code never changes meaning.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace ms {

enum class DType : uint8_t {
  kF32 = 0,
  kBF16 = 1,
  kF16 = 2,
  kI32 = 3,
  kI64 = 4,
  kU16 = 5,
  kU8 = 6,
};

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32,
                                       DType::kI64, DType::kU16,  DType::kU8};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU16: return 2;
    case DType::kU8: return 1;
  }
  return 0;
}

constexpr bool dtype_is_float(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}

// Lower-case names as written in files: "f32", "bf16", "f16", "i32", "i64", "u16", "u8".
std::string_view dtype_name(DType t);
// Accepts the names above and the safetensors spellings ("F32", "BF16", "I64", ...).
Result<DType> parse_dtype(std::string_view name);

}  // namespace ms
