// Elementwise fp32 kernels on the GPU, twins of lib/ops/elementwise.h: same names and argument
// order on device pointers, plus the stream to enqueue on, and bitwise the same results. Plain
// C++ declarations, so CPU-only code can include this header.
//
// Each entry point checks its arguments (null pointers with n > 0, misaligned pointers, partial
// overlaps) and returns InvalidArgument before launching; n == 0 launches nothing and touches
// no CUDA state. Launch failures (no device, bad device pointer) come back as CUDA Statuses.
#pragma once

#include <cstddef>

#include "core/status.h"
#include "kernels/device.h"

namespace ms::kernels {

// out[i] = a[i] + b[i]. a, b, out: device (n). out may be a or b.
Status add(const float* a, const float* b, float* out, size_t n, Stream stream = nullptr);

// out[i] = alpha * x[i]. x, out: device (n). out may be x.
Status scale(const float* x, float alpha, float* out, size_t n, Stream stream = nullptr);

// y[i] += alpha * x[i], product and sum rounded separately (no FMA, like the CPU twin).
// x, y: device (n), disjoint.
Status axpy(float alpha, const float* x, float* y, size_t n, Stream stream = nullptr);

}  // namespace ms::kernels
