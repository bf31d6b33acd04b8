// The nccl-tests busbw model; see comm_cost.h.
#include "plan/comm_cost.h"

namespace ms::plan {

double bus_factor(Collective op, int n) {
  if (n <= 1) return 0;
  const double f = static_cast<double>(n - 1) / n;
  switch (op) {
    case Collective::kAllReduce:
      return 2 * f;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return f;
    case Collective::kP2P:
      return 1;
  }
  return 0;
}

int latency_steps(Collective op, int n) {
  if (n <= 1) return 0;
  if (op == Collective::kP2P) return 1;
  return op == Collective::kAllReduce ? 2 * (n - 1) : n - 1;
}

double collective_seconds(const Link& link, Collective op, double bytes, int n) {
  if (n <= 1) return 0;
  return link.latency_us * 1e-6 * latency_steps(op, n) +
         bytes * bus_factor(op, n) / (link.bandwidth_gbs * 1e9);
}

}  // namespace ms::plan
