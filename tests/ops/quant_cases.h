// Test support for the quantized-linear tests (quant_gemm_test, quant_act_test): one row of a
// table of cases, the CPU code paths this machine runs, and the check that a row's bits do not
// depend on the rows beside it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
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

// On every supported path, each row of x run alone gives the bits it has in the batch of c.n
// rows: run(path, n, x) returns y, (n, c.rows).
template <class Run>
void expect_rows_alone_match_batch(const QuantCase& c, const float* x, Run run) {
  for (ops::CpuPath path : supported_quant_paths()) {
    const std::vector<float> batch = run(path, c.n, x);
    for (int64_t t = 0; t < c.n; ++t) {
      const std::vector<float> alone = run(path, 1, x + t * c.cols);
      ASSERT_EQ(std::memcmp(alone.data(), batch.data() + t * c.rows, alone.size() * 4), 0)
          << ops::cpu_path_name(path) << " row " << t;
    }
  }
}

}  // namespace ms::test
