// RMSNorm (Zhang & Sennrich 2019) as in Hugging Face Llama: y = w * (x * rstd) with
// rstd = 1 / sqrt(mean(x^2) + eps), forward and backward. rstd is saved per row so the
// backward need not recompute it; the normed output itself is cheap to recompute and is not
// kept by the model.
#pragma once

#include <cstdint>

namespace ms::ops {

// x: (n, d), weight: (d) -> out: (n, d), rstd: (n). out must not overlap x.
void rmsnorm_forward(const float* x, const float* weight, float* out, float* rstd, int64_t n,
                     int64_t d, float eps);

// x, dout: (n, d), weight: (d), rstd: (n) from the forward. Accumulates dx: (n, d) and
// dweight: (d). dweight is summed by column over rows in order (deterministic).
void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dout,
                      float* dx, float* dweight, int64_t n, int64_t d);

}  // namespace ms::ops
