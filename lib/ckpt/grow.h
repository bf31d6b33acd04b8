// `ms-ckpt grow`: lossless model expansion (after LEMON, Wang et al., ICLR 2024). A trained
// checkpoint becomes a wider and deeper model that computes the same function, so training goes
// on from what the small model learned. The plan (which unit copies which) is grow_plan.h; this
// file applies it to the tensors and writes the grown checkpoint. The rules, for a pre-norm
// Llama block (x: the residual stream, D wide; n = RMSNorm(x) = g * x / sqrt(mean(x^2) + eps)):
//
// Hidden stream (D -> D'). The stream is extended with D' - D zeros: x' = [x, 0]. Every writer
// of the stream (embedding columns, o_proj and down_proj rows, each expert's w2 rows) is zero on
// the new coordinates, so they stay exactly 0 through every layer. RMSNorm then sees
// mean(x'^2) = (D / D') mean(x^2), so with c = sqrt(D / D'), eps' = eps D / D' and g' = c g on
// the old coordinates,
//   g'_i x_i / sqrt(mean(x'^2) + eps') = c g_i x_i / (c sqrt(mean(x^2) + eps)) = n_i,
// and on the new ones the output is 0 whatever g' is (set to c, the scaled "ones" a fresh norm
// has, so gradients reach them). model.norm_eps is one value for every norm, and every norm
// reads the same D'-wide stream, so one eps' serves them all. Every reader of the stream
// (q/k/v, gate/up, w1/w3, an untied lm_head) multiplies the new coordinates by 0, so its new
// columns are free: they get fresh normal(0, 0.02) values (Philox keyed by the seed and the
// tensor's name), through which the new coordinates receive gradients and come alive; the MoE
// router's new columns are zero, so routing is unchanged. A tied embedding is both a writer
// and a reader: its new columns are zero, which serves as both.
//
// Feed-forward neurons (F -> F'). Neuron i computes h_i = silu(gate_i . n) * (up_i . n) and
// adds down[:, i] h_i. A copy repeats gate_i and up_i together (the SwiGLU product is of the
// pair, so copying one without the other changes h_i) and carries share s_k of down[:, i], the
// shares of the copies summing to 1: sum_k s_k down[:, i] h_i = down[:, i] h_i. The shares are
// unequal ((k + 1) / (1 + ... + n) for copy k of n), so the copies' gate and up rows receive
// gradients in those proportions and drift apart in training; a neuron copied once keeps its
// weights. F' need not be a multiple of F: the first F' mod F neurons get one copy more.
// Every routed expert of a MoE layer (and the shared expert, by shared_expert_d_ff) is widened
// the same way; the router is unchanged.
//
// Attention heads (H, K -> H', K'; head size D / H fixed, since rotary frequencies depend on
// it). Query head h reads key/value head h / G (G = H / K). A key/value head is copied whole
// (k and v rows), and the query heads its copies serve are copies of its own group's query
// heads, so each query head still attends over the same keys and values and returns the same
// output. A query head's copies share its o_proj columns like a neuron's copies share down's.
// New key/value head k' copies head k' mod K; its G' = H' / K' query heads take the next G'
// query heads of that group, cycling, across the copies of the head, so floor(K' / K) G' >= G is
// what makes every original query head appear (otherwise: refused, "breaks the query grouping").
//
// Depth (L -> L'). A new layer after original layer l copies l's weights (so its attention and
// router start from sensible patterns) but its output projections (o_proj, down_proj, w2) are
// zero: attention and feed-forward both add 0 to the stream, so the block is the identity. Its
// output projections receive gradients at once (their inputs are not zero), and the rest of
// the block from the step after.
//
// Optimizer state: reset. The moments of a split or zero-padded weight have no consistent
// expanded value (Adam's second moment of a weight split s : 1 - s would be s^2 v, not a
// copy), so the grown checkpoint holds zero moments and optimizer_updates 0, so bias correction
// starts again. The step and the loader position are kept (training continues with the next
// unseen data) unless GrowOptions::restart_schedule asks for step 0 (a fresh warmup, which
// suits the reset moments); the spike guard's window is emptied (the grown model's gradient
// norms are not the small model's).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/grow_plan.h"
#include "ckpt/hf_names.h"
#include "comm/communicator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/env.h"

namespace ms::ckpt {

// One parameter of the grown model and the original parameter it was made from (for a new
// layer, the same parameter of the layer it copies).
struct GrownParameter {
  std::string name;
  std::string source;
  Tensor value;
};

// The grown model's parameters, in hf_parameter_specs(plan.to) order, from the original
// model's parameters in `source` (read one at a time). `seed` keys the fresh values of the
// readers' new columns. NotFound naming a parameter the catalog lacks; InvalidArgument when one
// has the wrong shape for plan.from.
Result<std::vector<GrownParameter>> grow_parameters(const GrowPlan& plan,
                                                    const TensorCatalog& source, uint64_t seed);

struct GrowOptions {
  std::string output_dir;  // a checkpoints/ directory: step-XXXXXXXX and latest are written in it
  bool replace = false;    // an existing step directory of that step may be replaced
  GrowTarget target;
  GrowInsert insert;
  std::optional<uint64_t> seed;  // for the new columns; default: the run config's run.seed
  // Write the grown checkpoint as step 0 (state step 0), so the resumed run starts its
  // learning-rate schedule, warmup included, afresh; the loader position is kept either way.
  bool restart_schedule = false;
};

struct GrowReport {
  std::string step_dir;  // the grown checkpoint
  GrowPlan plan;
  size_t parameters = 0;
  bool optimizer_state = false;  // zero moments were written (the source had moments)
};

// Grows the checkpoint at `step_dir` (a resolved step directory) and writes it through the
// training save path (Checkpointer, a sync save on `comm`, which must have one rank), so it
// is committed atomically and ms-train resumes from it with the grown model config, and
// `ms-ckpt export` and ms-infer read it. The manifest's config is the source's with the grown
// model section. InvalidArgument for a refused target (plan_grow), an output that is or is
// inside the source, a source tensor grow does not know (nothing is written then);
// AlreadyExists for an existing step directory without `replace`.
Result<GrowReport> grow_checkpoint(const std::string& step_dir, const GrowOptions& options,
                                   comm::Communicator& comm, io::Env& env);

}  // namespace ms::ckpt
