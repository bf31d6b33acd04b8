// Private to ops/quant_act.cc: the AVX2 chunk quantizer, compiled with -mavx2 where the compiler
// supports it (MS_QUANT_AVX2) and called only on CPUs that report AVX2.
#pragma once

#include <cstdint>

namespace ms::ops {

// One chunk of 64 activations -> its 64 codes (column order, or for int4 the even columns then
// the odd ones), its scale and, for int4, its 8 nibble biases: the same bits as the scalar
// quantize_chunk in quant_act.cc.
void quantize_chunk_avx2(const float* x, bool int4, int8_t* codes, float* scale, int32_t* bias);

}  // namespace ms::ops
