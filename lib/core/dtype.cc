#include "core/dtype.h"

#include <string>

namespace ms {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU16: return "u16";
    case DType::kU8: return "u8";
  }
  return "unknown";
}

Result<DType> parse_dtype(std::string_view name) {
  std::string n(name);
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "f32" || n == "float32") return DType::kF32;
  if (n == "bf16" || n == "bfloat16") return DType::kBF16;
  if (n == "f16" || n == "float16") return DType::kF16;
  if (n == "i32" || n == "int32") return DType::kI32;
  if (n == "i64" || n == "int64") return DType::kI64;
  if (n == "u16" || n == "uint16") return DType::kU16;
  if (n == "u8" || n == "uint8") return DType::kU8;
  return InvalidArgument("unknown dtype '" + std::string(name) +
                         "' (expected f32, bf16, f16, i32, i64, u16 or u8)");
}

}  // namespace ms
