// `ms-train plan --profile --config` for context-parallel layouts: the ring attention timed as
// the trainer runs it (parallel/ring_attention.h over a real cp group, each rank holding its two
// balanced chunks with the causal mask judged from global positions), so that a prediction has
// the ring's exposed hops, the balanced chunks' partial blocks and the per-block calls and
// merges as this machine runs them rather than 1/cp of the attention (op_costs.h's
// cp_attention_key).
#pragma once

#include <utility>

#include "comm/communicator.h"
#include "core/status.h"
#include "plan/op_costs.h"

namespace ms::plan {

// Collective over `group` (the cp ranks, every one running it at once): the forward and the
// backward of `op`'s whole sequence over group.size() ranks, seconds per call, rank 0's lower
// quartile over at least 8 calls and `min_seconds`.
Result<std::pair<double, double>> cp_attention_times(comm::Communicator& group,
                                                     const AttentionOp& op, double min_seconds);

// Parses a cp_attention_key: the op and cp; false when `key` is not one.
bool parse_cp_attention_key(const std::string& key, AttentionOp& op, int& cp, bool& backward);

}  // namespace ms::plan
