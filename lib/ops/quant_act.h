// Activations quantized to int8 for the integer kernels of the quantized linear (the same idea
// as llama.cpp's Q8_0 activation blocks, not its format): with int8 or int4 weights, a row of x
// is cut into chunks of 64 columns (128 for int4 weights in groups of 128), each held as int8
// codes and one f32 scale
//   d = max|chunk| / 127,   q = round(x * (127 / max|chunk|)) (ties to even), |q| <= 127,
// and a dot product is then a sum of exact integer products per chunk, scaled once per chunk.
// On AVX2 that is 32 multiply-adds an instruction (vpmaddubsw) instead of 8 fused f32 ones
// after decoding each weight to f32, which is what keeps int4 and int8 decode from the memory
// bandwidth bound with f32 activations (docs/infer.md, "Activations").
//
// The codes are an approximation of x: an output moves by at most
// sum_k |w_k| * d_chunk(k) / 2 from its f32-activation value, which the tests hold it to.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "ops/quant.h"

namespace ms::ops {

enum class ActivationFormat : uint8_t { kF32 = 0, kInt8 = 1 };

// "f32", "int8".
std::string_view activation_format_name(ActivationFormat format);
// The inverse; InvalidArgument naming the text and the choices otherwise.
Result<ActivationFormat> parse_activation_format(std::string_view name);

// Columns per activation chunk: the unit of the codes' layout, and of a scale unless
// activation_scale_cols says more.
inline constexpr int64_t kActivationChunk = 64;

// Columns per activation scale for weights w: 128 for int4 in groups of 128, 64 otherwise. A
// chunk of 128 shares its weight group's span, so the kernel adds the group's integer products
// (in int16, 4 * 2 * 15 * 127 at most) before it converts and scales them once, instead of
// once per 64 columns (AVX2: 19 vector instructions per 128 weights instead of 22), for the format
// that reads the fewest bytes (docs/bench/infer.md, "A scale per 128 activations"). The coarser
// scale costs int4-g128 a little activation precision (docs/infer.md, "Activations").
int64_t activation_scale_cols(const QuantView& w);
// Whether x may be quantized for weights in `format` with a scale per `scale_cols` columns: 64,
// or 128 for int4.
bool activation_scale_cols_valid(WeightFormat format, int64_t scale_cols);

// Whether int8 activations apply to a matrix: int8 or int4 weights whose rows are whole
// chunks. Other matrices (f32, bf16, or a width that is not a multiple of 64) keep f32
// activations whatever is asked.
bool int8_activations_apply(const QuantView& w);

// Rows of x quantized for one weight format. The codes of a chunk are laid out in the order
// the integer kernels meet the weights (code_index):
//   int8 weights: column order;
//   int4 weights: the chunk's even columns, then its odd ones (the low and the high nibbles of
//     its 32 packed bytes).
// For int4 each chunk also carries nibble_bias: 8 times the sum of the codes of each 8
// consecutive columns, which a kernel that multiplies by the stored nibbles (code + 8)
// subtracts to get the products with the codes.
struct Int8Activations {
  WeightFormat format = WeightFormat::kInt8;
  int64_t n = 0, cols = 0;
  int64_t scale_cols = kActivationChunk;  // columns per scale: 64 or 128
  std::vector<int8_t> codes;              // (n, cols), laid out per chunk of 64
  std::vector<float> scales;              // (n, cols / scale_cols)
  std::vector<int32_t> nibble_bias;  // int4: (n, cols / 8); empty otherwise

  // Where column `col` of a row is among that row's codes.
  static int64_t code_index(WeightFormat format, int64_t col) {
    if (format != WeightFormat::kInt4) return col;
    const int64_t in_chunk = col % kActivationChunk;
    return col - in_chunk + (in_chunk % 2) * (kActivationChunk / 2) + in_chunk / 2;
  }
  int code(int64_t row, int64_t col) const {
    return codes[static_cast<size_t>(row * cols + code_index(format, col))];
  }
  float scale(int64_t row, int64_t col) const {
    return scales[static_cast<size_t>(row * (cols / scale_cols) + col / scale_cols)];
  }
};

// x: (n, cols) f32 -> out, laid out for weights in `format` (kInt8 or kInt4), a scale per 64
// columns; cols is a multiple of 64 (asserted). out's buffers are reused when large enough. A
// chunk holding a non-finite value gets codes 0 and scale NaN, so every output it feeds is NaN,
// as with f32.
void quantize_activations(const float* x, int64_t n, int64_t cols, WeightFormat format,
                          Int8Activations* out);
// The same with a scale per `scale_cols` columns (64, or 128 for int4; cols a multiple of it),
// with the scalar loop when `vector` is false, else with the AVX2 quantizer where the CPU has it
// (the overload above). Both give the same bits; the tests compare them.
void quantize_activations(const float* x, int64_t n, int64_t cols, WeightFormat format,
                          int64_t scale_cols, Int8Activations* out, bool vector);

// For int4 weights in groups of `group_size` (a multiple of 8 dividing x.scale_cols): per row
// of x and weight group, x's scale times the sum of the group's nibble_bias, (n, cols /
// group_size). An output's nibble biases come to sum_g w_scale[g] * group_bias[g], which a
// kernel may subtract once instead of chunk by chunk.
void int4_group_bias(const Int8Activations& x, int64_t group_size, std::vector<float>* out);

// For a kernel that multiplies a 64-byte line of int4 weights (two chunks, 128 columns) by x in
// one pass per nibble half: x's codes with, per step of 128 columns, chunk 0's even columns,
// chunk 1's even ones, chunk 0's odd ones, then chunk 1's odd ones (32 each), so that the
// line's low nibbles meet the first 64 and its high ones the last 64. A last single chunk keeps
// x's layout. `codes` is resized to x.codes'.
void int4_step_layout(const Int8Activations& x, std::vector<int8_t>* codes);

}  // namespace ms::ops
