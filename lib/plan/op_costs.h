// Per-op times of one rank: GEMMs, attention and elementwise work at the shapes a layout
// produces, and collectives on the link its group spans. A time is measured where the cluster
// file holds the op at that exact shape (`ms-train plan --profile --config`), else derived from
// the device profile: GEMMs from the efficiency curve, attention as a GEMM of its FLOPs at
// device.attention_efficiency of that rate, elementwise work from the memory bandwidth. Ranks
// beyond the node's devices share them (an oversubscribed CPU), which slows compute by the ratio,
// and with more than one rank on a node each runs at the cluster's concurrency_efficiency, or at
// the op's own time measured with every rank running it (device.measured_ops_concurrent).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "plan/cluster.h"
#include "plan/comm_cost.h"

namespace ms::plan {

// What-if factors: compute 2 is twice as fast compute (GEMMs, attention, memory), net 0.5 links
// at half the bandwidth and twice the latency.
struct Scaling {
  double compute = 1, net = 1;
};

struct AttentionOp {
  int64_t batch = 1, seq = 1, heads = 1, kv_heads = 1, head_dim = 1, window = 0;
};

// The names measured ops are stored under: "gemm 512x352x128" (m x n x k, row-major
// C(m,n) = A(m,k) B(k,n)), "attn_fwd 4x128x4x4x32x0" (batch x seq x heads x kv_heads x
// head_dim x window), "attn_bwd ...".
std::string gemm_key(int64_t m, int64_t n, int64_t k);
std::string attention_key(const AttentionOp& a, bool backward);
double attention_flops(const AttentionOp& a, bool backward);
// One whole transformer layer of the run's model as the trainer runs it (model::Transformer on
// one rank, no parallelism), for a micro-batch of `batch` sequences of `seq` tokens, seconds per
// layer: "layer_fwd 4x128", "layer_bwd 4x128" (the backward's input and weight gradients).
// `ms-train plan --profile --config` measures them; the prediction scales its op sums by
// measured layer / op sum at that shape (predict.cc), which brings in what the op sums leave
// out: caches a layer's activations overflow, the elementwise passes, allocation.
std::string layer_key(int64_t batch, int64_t seq, bool backward);
// Context parallelism's attention as the trainer runs it on one rank of a cp group (the ring of
// parallel/ring_attention.h: every key/value block of the group against the rank's balanced
// chunks, the hops and their waits, the merges), for the whole sequence `a.seq` over `cp` ranks:
// "cp_attn_fwd BxTxHxKVxHDxWxCP", "cp_attn_bwd ...". `ms-train plan --profile --config` times
// it with cp ranks running the ring at once (profile_cp.h).
std::string cp_attention_key(const AttentionOp& a, int cp, bool backward);

class CostModel {
 public:
  // `ranks_on_node`: the job's ranks on one node (min(world, ranks_per_node)).
  CostModel(const Cluster& cluster, int ranks_on_node, Scaling scaling = {});

  double gemm_seconds(int64_t m, int64_t n, int64_t k) const;
  double attention_seconds(const AttentionOp& a, bool backward) const;
  // A whole layer measured at (batch, seq) (layer_key), with the same sharing as a measured op;
  // 0 where the cluster file holds no such measurement.
  double measured_layer_seconds(int64_t batch, int64_t seq, bool backward) const;
  // Context parallelism's ring attention measured at (a, cp) (cp_attention_key), its hops and
  // waits included; 0 where the cluster file holds no such measurement. It was timed with the
  // cp ranks alone on the node, so it is rescaled from their share of the node's cores then to
  // the job's share now.
  double measured_cp_attention_seconds(const AttentionOp& a, int cp, bool backward) const;
  double elementwise_seconds(double bytes) const;
  // `elements` of a kernel measured at `ns_per_element` (one rank alone).
  double per_element_seconds(double elements, double ns_per_element) const;
  // A collective over `n` ranks, on the inter-node link when `inter_node`, else on the
  // intra-node one (links.oversubscribed instead, where measured, for a node with more ranks
  // than devices).
  double comm_seconds(Collective op, double bytes, int n, bool inter_node) const;

  // The GEMM rate the curve gives for one call of `flops` FLOPs (before sharing), flop/s.
  double curve_rate(double flops) const;
  // The measured cost of the dp reduction for a job with this many ranks on a node
  // (Cluster::dp_cost, or dp_cost_oversubscribed where the node is oversubscribed and it was
  // measured); nullopt where the cluster file has none.
  std::optional<DpReductionCost> dp_reduction_cost() const;
  double compute_share() const { return share_; }
  const Cluster& cluster() const { return cluster_; }

  // While set, every op looked up is added to `keys` (what --profile then measures).
  void record_ops(std::set<std::string>* keys) { record_ = keys; }

 private:
  double measured_or(const std::string& key, double derived) const;
  const Cluster& cluster_;
  double share_ = 1;
  double oversubscription_ = 1;  // devices / ranks on a node, at most 1
  bool concurrent_ = false;      // more than one rank on a node
  bool oversubscribed_ = false;  // more ranks than devices on a node
  Scaling scaling_;
  std::set<std::string>* record_ = nullptr;
};

}  // namespace ms::plan
