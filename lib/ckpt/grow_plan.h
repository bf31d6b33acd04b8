// The plan of `ms-ckpt grow` (lossless model expansion after LEMON): from a model's config and
// the requested sizes, which unit of the original model every unit of the grown one copies
// (query and key/value heads, feed-forward neurons, layers) and what share of the original's
// outgoing weights each copy carries. Pure arithmetic on configs, so tests check it without
// files; grow.h applies it to tensors, and the rules and their maths are written out there.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"

namespace ms::ckpt {

// The sizes `--to` names; 0: not named (derived from the others, or unchanged).
struct GrowTarget {
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t d_ff = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t shared_expert_d_ff = 0;
};

// "d_model=96,n_layers=6,d_ff=256" -> target: any subset of d_model, n_layers, d_ff, n_heads,
// n_kv_heads, shared_expert_d_ff, in any order, each a positive integer. Unknown or repeated
// keys and bad numbers are InvalidArgument naming them.
Result<GrowTarget> parse_grow_target(std::string_view text);

// Where new layers go (`--insert`): after every `every`-th original layer, or after each
// original layer listed in `after` (0-based; a layer listed twice gets two new layers after it).
// Neither: spread evenly over the depth.
struct GrowInsert {
  int64_t every = 0;
  std::vector<int64_t> after;
};

// "every-2" or "1,3,3" -> GrowInsert; "" -> the default (spread evenly). InvalidArgument naming
// the text otherwise.
Result<GrowInsert> parse_grow_insert(std::string_view text);

// One unit of the grown model (a query head, a key/value head, a neuron): the original unit it
// copies and the share of that unit's outgoing weights it carries. The shares of all copies of
// one original unit sum to 1; a unit copied once keeps share 1 exactly.
struct UnitCopy {
  int64_t source = 0;
  float share = 1;
};

// One layer of the grown model: the original layer it copies, and whether it is a new layer
// (whose output projections are zero, so the block adds nothing to the residual stream).
struct GrownLayer {
  int64_t source = 0;
  bool inserted = false;
};

struct GrowPlan {
  config::ModelConfig from;  // the checkpoint's model
  config::ModelConfig to;    // the grown model (norm_eps scaled by from.d_model / to.d_model)
  std::vector<GrownLayer> layers;       // to.n_layers entries
  std::vector<UnitCopy> query_heads;    // to.n_heads entries
  std::vector<UnitCopy> kv_heads;       // to.n_kv_heads entries (shares unused: k, v are read)
  std::vector<UnitCopy> ffn;            // to.d_ff neurons (each routed expert alike)
  std::vector<UnitCopy> shared_ffn;     // to.moe.shared_expert_d_ff neurons
};

// Checks that `target` (with `insert`) grows `from` losslessly and plans it. InvalidArgument
// naming the key and the rule it breaks: a size smaller than the checkpoint's (grow never
// shrinks), a head size d_model / n_heads that changes (rotary frequencies depend on it), a
// d_model that is not a multiple of the head size, an n_heads that n_kv_heads does not divide,
// key/value head copies too few to carry every query head of their group, fewer key/value
// heads than before, an --insert that disagrees with n_layers or names a layer that does not
// exist, a shared_expert_d_ff for a model without a shared expert.
Result<GrowPlan> plan_grow(const config::ModelConfig& from, const GrowTarget& target,
                           const GrowInsert& insert);

// The grown sizes as --to text, e.g. "d_model=96,n_layers=6,d_ff=256,n_heads=6,n_kv_heads=3".
std::string grow_target_string(const config::ModelConfig& to);

}  // namespace ms::ckpt
