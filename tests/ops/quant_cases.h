// Test support for the quantized-linear tests (quant_gemm_test, quant_act_test): one row of a
// table of cases, and the CPU code paths this machine runs.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "ops/quant_gemm.h"

namespace ms::test {

// y: (n, rows) = x: (n, cols) @ W^T with W in `format` (int4 groups of `group`).
struct QuantCase {
  const char* name;
  ops::WeightFormat format;
  int64_t group;
  int64_t n, rows, cols;
};
inline void PrintTo(const QuantCase& c, std::ostream* os) { *os << c.name; }

// Every path this CPU supports, the scalar twin first.
inline std::vector<ops::CpuPath> supported_quant_paths() {
  std::vector<ops::CpuPath> paths;
  for (ops::CpuPath p : {ops::CpuPath::kScalar, ops::CpuPath::kAvx2, ops::CpuPath::kAvx512}) {
    if (ops::cpu_path_supported(p)) paths.push_back(p);
  }
  return paths;
}

}  // namespace ms::test
