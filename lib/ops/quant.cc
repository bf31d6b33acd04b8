// Quantization by absolute maximum: each scale covers a row (int8) or a group (int4), and the
// codes round w / s to the nearest integer, ties to even (std::nearbyint in the default mode).
#include "ops/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"

namespace ms::ops {
namespace {

constexpr int kInt8Max = 127;
constexpr int kInt4Max = 7;
constexpr int kInt4Offset = 8;

// The scale for values [v, v + n): max|v| / qmax, 0 for an all-zero block.
float absmax_scale(const float* v, int64_t n, int qmax) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(v[i]));
  return m / static_cast<float>(qmax);
}

int quantize_value(float v, float scale, int qmax) {
  if (scale == 0) return 0;
  const float q = std::nearbyint(v / scale);
  return static_cast<int>(std::clamp(q, -static_cast<float>(qmax), static_cast<float>(qmax)));
}

Status check_finite(const float* w, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (!std::isfinite(w[i])) {
      return InvalidArgument("weight (row " + std::to_string(i / cols) + ", col " +
                             std::to_string(i % cols) + ") is " + std::to_string(w[i]) +
                             "; only finite weights can be quantized");
    }
  }
  return Status::OK();
}

void quantize_int8(const float* w, QuantizedMatrix& q) {
  for (int64_t r = 0; r < q.rows; ++r) {
    const float* row = w + r * q.cols;
    const float s = absmax_scale(row, q.cols, kInt8Max);
    q.scales[r] = s;
    for (int64_t c = 0; c < q.cols; ++c) {
      q.values[r * q.cols + c] = static_cast<uint8_t>(static_cast<int8_t>(
          quantize_value(row[c], s, kInt8Max)));
    }
  }
}

void quantize_int4(const float* w, QuantizedMatrix& q) {
  const int64_t groups = q.cols / q.group_size;
  for (int64_t r = 0; r < q.rows; ++r) {
    uint8_t* out = q.values.data() + r * (q.cols / 2);
    for (int64_t g = 0; g < groups; ++g) {
      const float* v = w + r * q.cols + g * q.group_size;
      const float s = absmax_scale(v, q.group_size, kInt4Max);
      q.scales[r * groups + g] = s;
      for (int64_t i = 0; i < q.group_size; i += 2) {
        const int lo = quantize_value(v[i], s, kInt4Max) + kInt4Offset;
        const int hi = quantize_value(v[i + 1], s, kInt4Max) + kInt4Offset;
        out[(g * q.group_size + i) / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

}  // namespace

std::string_view weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kInt8: return "int8";
    case WeightFormat::kInt4: return "int4";
  }
  return "unknown";
}

Result<WeightFormat> parse_weight_format(std::string_view name) {
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kInt8,
                         WeightFormat::kInt4}) {
    if (name == weight_format_name(f)) return f;
  }
  return InvalidArgument("unknown weight format '" + std::string(name) +
                         "'; choose f32, bf16, int8 or int4");
}

int64_t value_bytes(WeightFormat format, int64_t rows, int64_t cols) {
  switch (format) {
    case WeightFormat::kF32: return rows * cols * 4;
    case WeightFormat::kBF16: return rows * cols * 2;
    case WeightFormat::kInt8: return rows * cols;
    case WeightFormat::kInt4: return rows * cols / 2;
  }
  return 0;
}

int64_t scale_count(WeightFormat format, int64_t rows, int64_t cols, int64_t group_size) {
  if (format == WeightFormat::kInt8) return rows;
  if (format == WeightFormat::kInt4) return rows * (cols / group_size);
  return 0;
}

Status check_quantize_shape(WeightFormat format, int64_t rows, int64_t cols, int64_t group_size) {
  if (rows < 1 || cols < 1) {
    return InvalidArgument("weight shape (" + std::to_string(rows) + ", " + std::to_string(cols) +
                           ") is empty or negative; rows and cols must be at least 1");
  }
  if (format != WeightFormat::kInt4) return Status::OK();
  if (std::find(std::begin(kInt4GroupSizes), std::end(kInt4GroupSizes), group_size) ==
      std::end(kInt4GroupSizes)) {
    return InvalidArgument("int4 group size " + std::to_string(group_size) +
                           " is not supported; use 32, 64 or 128");
  }
  if (cols % group_size != 0) {
    return InvalidArgument("int4 group size " + std::to_string(group_size) +
                           " does not divide the input dimension (cols " + std::to_string(cols) +
                           "); choose a group size that does");
  }
  return Status::OK();
}

Result<QuantizedMatrix> quantize_weights(const float* w, int64_t rows, int64_t cols,
                                         WeightFormat format, int64_t group_size) {
  MS_RETURN_IF_ERROR(check_quantize_shape(format, rows, cols, group_size));
  MS_RETURN_IF_ERROR(check_finite(w, rows, cols));
  QuantizedMatrix q;
  q.format = format;
  q.rows = rows;
  q.cols = cols;
  q.group_size = format == WeightFormat::kInt4 ? group_size
                 : format == WeightFormat::kInt8 ? cols
                                                 : 0;
  q.values.resize(static_cast<size_t>(value_bytes(format, rows, cols)));
  q.scales.resize(static_cast<size_t>(scale_count(format, rows, cols, q.group_size)));
  switch (format) {
    case WeightFormat::kF32:
      std::memcpy(q.values.data(), w, q.values.size());
      break;
    case WeightFormat::kBF16:
      for (int64_t i = 0; i < rows * cols; ++i) {
        const uint16_t bits = float_to_bf16(w[i]);
        std::memcpy(q.values.data() + 2 * i, &bits, 2);
      }
      break;
    case WeightFormat::kInt8: quantize_int8(w, q); break;
    case WeightFormat::kInt4: quantize_int4(w, q); break;
  }
  return q;
}

void dequantize_weights(const QuantView& w, float* out) {
  const int64_t n = w.rows * w.cols;
  switch (w.format) {
    case WeightFormat::kF32:
      std::memcpy(out, w.values, static_cast<size_t>(n) * sizeof(float));
      return;
    case WeightFormat::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, w.values + 2 * i, 2);
        out[i] = bf16_to_float(bits);
      }
      return;
    case WeightFormat::kInt8:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = static_cast<float>(static_cast<int8_t>(w.values[i])) * w.scales[i / w.cols];
      }
      return;
    case WeightFormat::kInt4: {
      const int64_t groups = w.cols / w.group_size;
      for (int64_t r = 0; r < w.rows; ++r) {
        const uint8_t* row = w.values + r * (w.cols / 2);
        for (int64_t c = 0; c < w.cols; ++c) {
          out[r * w.cols + c] =
              static_cast<float>(int4_code(row, c)) * w.scales[r * groups + c / w.group_size];
        }
      }
      return;
    }
  }
}

}  // namespace ms::ops
