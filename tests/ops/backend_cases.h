// The backend seam's table: every op of ops/backend.h, run through a backend and through the
// lib/ops reference on the same seeded inputs. The CPU backend must match bitwise (it is
// lib/ops; backend_test.cc); the CUDA backend joins the table on a GPU with its tolerance
// (kernel_backend_test.cc). A case fails when a backend passes an argument to the wrong place
// (dx for dw, gate for up, a missing accumulation), so the table pins what the model relies on
// when it calls through the seam.
#pragma once

#include <functional>
#include <vector>

#include "ops/backend.h"

namespace ms::ops {

using Floats = std::vector<float>;

// One op case: runs the op either through `backend` (host buffers: a device backend runs
// behind host_facing_backend.h) or, when backend is null, through the lib/ops reference, and
// returns every buffer it wrote, concatenated.
struct OpCase {
  const char* name;
  std::function<Floats(Backend*)> run;
};

// At kBf16 the reference reads the matmul-class ops' inputs rounded to bf16 (ops/backend.h), so
// a bf16 backend matches it as an f32 one matches the plain reference.
std::vector<OpCase> backend_cases(MatmulPrecision precision = MatmulPrecision::kF32);

}  // namespace ms::ops
