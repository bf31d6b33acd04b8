// CommStats: how long a stream of collectives (or point-to-point exchanges) was in flight and how
// much of that the caller spent waiting instead of computing. The one overlap statistic, summed
// over calls and steps: the data-parallel gradient reduction (train::DistributedOptimizer), the
// chunked tensor-parallel collectives (tp_overlap.h), the expert-parallel all-to-alls and the
// context-parallel ring (model::Transformer::take_ep_comm_stats, take_cp_comm_stats). The
// trainer's end-of-run report prints each in the same terms.
#pragma once

#include <cstdint>

namespace ms::parallel {

struct CommStats {
  int64_t collectives = 0;  // collectives issued (ep: all-to-alls; cp: ring hops)
  uint64_t bytes = 0;       // what the producer counts: nccl-tests' "size" for tp collectives,
                            // the gradient buffers for dp, bytes sent to other ranks for ep, cp
  double active_s = 0;      // first issue to last observed completion
  double exposed_s = 0;     // time the caller spent inside communication calls (issue, test,
                            // wait) instead of computing: the part of active_s not hidden
  // 1 - exposed_s / active_s, clamped to [0, 1]; 0 when nothing was active.
  double hidden_fraction() const;
  void add(const CommStats& other);
};

}  // namespace ms::parallel
