// Weight formats for serving: a weight matrix W: (rows = out_features, cols = in_features), as
// the linear layers store it, held as f32, bf16, int8 or int4. The integer formats are
// symmetric (zero maps to zero) and round to nearest:
//   int8: one f32 scale per output channel (row), s = max|row| / 127, q in [-127, 127];
//   int4: one f32 scale per group of group_size consecutive inputs of a row (32, 64 or 128),
//         s = max|group| / 7, q in [-7, 7], two values a byte (docs/infer.md has the layout).
// A weight is q * s. Quantizing and dequantizing are pure functions of the values; the fused
// kernels that multiply by a quantized W are in ops/quant_gemm.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/huge_pages.h"
#include "core/status.h"

namespace ms::ops {

// Append-only: the codes may be stored in files.
enum class WeightFormat : uint8_t { kF32 = 0, kBF16 = 1, kInt8 = 2, kInt4 = 3 };

// "f32", "bf16", "int8", "int4".
std::string_view weight_format_name(WeightFormat format);
// The inverse of weight_format_name; InvalidArgument naming the text and the choices otherwise.
Result<WeightFormat> parse_weight_format(std::string_view name);

// The group sizes int4 accepts, and the default.
inline constexpr int64_t kInt4GroupSizes[] = {32, 64, 128};
inline constexpr int64_t kDefaultInt4GroupSize = 64;

// A borrowed, read-only view of a quantized matrix: what the kernels take (plain pointers, so
// the same struct describes host and device memory).
struct QuantView {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0, cols = 0;
  int64_t group_size = 0;       // int4: inputs per scale; int8: cols; f32 and bf16: 0
  const uint8_t* values = nullptr;  // f32/bf16 elements, int8 codes or int4 byte pairs, row-major
  const float* scales = nullptr;    // int8: (rows); int4: (rows, cols / group_size); else null
};

// Bytes of values and scales for a (rows, cols) matrix in `format` (group_size for int4).
int64_t value_bytes(WeightFormat format, int64_t rows, int64_t cols);
int64_t scale_count(WeightFormat format, int64_t rows, int64_t cols, int64_t group_size);

// An owned quantized matrix. Built by quantize_weights; movable and copyable. Its arrays are
// huge-page backed (core/huge_pages.h): a decode step streams every serving weight once.
struct QuantizedMatrix {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0, cols = 0;
  int64_t group_size = 0;
  HugePageVector<uint8_t> values;
  HugePageVector<float> scales;

  QuantView view() const {
    return {format, rows, cols, group_size, values.data(), scales.data()};
  }
  // Bytes held: values plus scales (what a decode step reads).
  int64_t bytes() const {
    return static_cast<int64_t>(values.size() + scales.size() * sizeof(float));
  }
};

// InvalidArgument naming the offending value when rows or cols is below 1, or, for int4, when
// group_size is not 32, 64 or 128 or does not divide cols. group_size is ignored otherwise.
Status check_quantize_shape(WeightFormat format, int64_t rows, int64_t cols, int64_t group_size);

// Quantizes w: (rows, cols) f32 row-major. Errors: check_quantize_shape's, and InvalidArgument
// naming the element (row, col) when a weight is not finite.
Result<QuantizedMatrix> quantize_weights(const float* w, int64_t rows, int64_t cols,
                                         WeightFormat format,
                                         int64_t group_size = kDefaultInt4GroupSize);

// The weights the matrix stands for, out: (rows, cols) f32: what the kernels multiply by.
void dequantize_weights(const QuantView& w, float* out);

// The int4 code of column `col` in its row's packed bytes (value in [-7, 7]): the low nibble
// holds the even column, the high nibble the odd one, each as q + 8.
inline int int4_code(const uint8_t* row_bytes, int64_t col) {
  const uint8_t byte = row_bytes[col / 2];
  return static_cast<int>((col % 2 == 0) ? (byte & 0x0f) : (byte >> 4)) - 8;
}

}  // namespace ms::ops
