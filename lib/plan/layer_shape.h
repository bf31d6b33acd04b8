// The shapes of one rank's share of a transformer layer under a layout, and the layer's GEMMs:
// what the step-time model (predict.cc) costs and the memory model (memory.cc) sizes the
// backends' operand scratch by. Pure arithmetic on the config and the layout.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "config/run_config.h"
#include "plan/layout.h"

namespace ms::plan {

// One rank's share of a layer, for a micro-batch of B sequences of T tokens each (the rank's
// T = seq_len / cp under context parallelism; full_T the whole sequence).
struct LayerShape {
  int64_t B = 0, T = 0, full_T = 0, N = 0, Nr = 0, D = 0, hd = 0, heads = 0, kv_heads = 0, d_ff = 0,
          shared_d_ff = 0, experts = 0, top_k = 0, local_experts = 0, expert_rows = 0, vocab = 0,
          window = 0;
  bool sp = false;
};

LayerShape layer_shape(const config::RunConfig& c, const Layout& l);

// Forward GEMMs (m, n, k) of one layer: y (m x n) = x (m x k) times w (n x k) transposed.
std::vector<std::array<int64_t, 3>> layer_gemms(const LayerShape& s);

}  // namespace ms::plan
