// Private to ops/quant_act.cc: the AVX2 chunk quantizer, compiled with -mavx2 where the compiler
// supports it (MS_QUANT_AVX2) and called only on CPUs that report AVX2.
#pragma once

#include <cstdint>

namespace ms::ops {

// The `cols` activations of one scale (64, or 128 for int4) -> their codes (per chunk of 64:
// column order, or for int4 the even columns then the odd ones), the scale and, for int4, a
// nibble bias per 8 columns: the same bits as the scalar quantize_chunk in quant_act.cc.
void quantize_chunk_avx2(const float* x, int64_t cols, bool int4, int8_t* codes, float* scale,
                         int32_t* bias);

}  // namespace ms::ops
