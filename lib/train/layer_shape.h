// The shapes of one rank's share of a transformer layer under a config's parallel layout, the
// layer's GEMMs, and the operand copies the backends keep at bf16 sized from them: what the
// planner's step-time model (plan/predict.cc) costs, and what the dry run, the planner's memory
// model and the trainer's own memory plan add for bf16. Pure arithmetic on the config.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "config/run_config.h"

namespace ms::train {

// One rank's share of a layer, for a micro-batch of B sequences of T tokens each (the rank's
// T = seq_len / cp under context parallelism; full_T the whole sequence).
struct LayerShape {
  int64_t B = 0, T = 0, full_T = 0, N = 0, Nr = 0, D = 0, hd = 0, heads = 0, kv_heads = 0, d_ff = 0,
          shared_d_ff = 0, experts = 0, top_k = 0, local_experts = 0, expert_rows = 0, vocab = 0,
          window = 0;
  bool sp = false;
};

// Under `c`'s parallel keys (tp, cp, ep, sequence parallelism) and train.micro_batch.
LayerShape layer_shape(const config::RunConfig& c);

// Forward GEMMs (m, n, k) of one layer: y (m x n) = x (m x k) times w (n x k) transposed.
std::vector<std::array<int64_t, 3>> layer_gemms(const LayerShape& s);

// The operand copies a backend keeps for one rank at bf16 matmul precision (ops/backend.h),
// in bytes; 0 at f32. The host backend rounds each matmul-class call's inputs into f32 copies in
// four per-thread slots (a linear layer's x, w and dy and attention's dout; attention's q, k
// and v share the first three), each grown to its largest call. The CUDA backend casts a linear
// layer's x, w and dy to bf16 and rounds attention's q, k, v and dout into f32 copies, each
// grown by doubling, so to up to twice its largest call: the figure is that bound. The calls
// are the layer's GEMMs, the router's, and on the last pipeline rank (`lm_head`) the LM head's,
// whose dy is tokens x vocabulary; MoE experts are sized with balanced routing, so a step whose
// routing sends one expert more rows grows its slots further.
double bf16_scratch_bytes(const config::RunConfig& c, bool on_device, bool lm_head);

}  // namespace ms::train
