// Compressed data-parallel communication for ZeRO-1 (docs/parallel.md, "Compressed data
// parallelism"): the gradient reduce-scatter and the parameter all-gather of each bucket with
// quantized messages (parallel/wire_quant.h), in the spirit of SDP4Bit and ZeRO++.
//
// A bucket holds dp parts of P values; dp rank r owns part r (FlatLayout's ZeRO rule).
//   Gradients, one level: each rank quantizes every part of its bucket and sends part r to
//     rank r (one all-to-all); the owner dequantizes the dp messages and sums them in rank
//     order. Compressed payloads never meet MPI's arithmetic, so the sum is the same on every
//     run.
//   Gradients, two levels: the dp ranks form nodes of L ranks (the same L on every node). Hop 1
//     sends, 8 bits, to each rank of the node the parts owned by that rank's "column" (the ranks
//     with its local index, one per node); the receiver sums them, requantizes them to 4 bits
//     and hop 2 sends each to its owner across the nodes. Only hop 2 crosses nodes; on one
//     node there is no hop 2.
//   Hadamard smoothing (optional): the sender transforms each compressed run in blocks of 32
//     before quantizing, and the owner transforms its sum back (the transform is linear and
//     its own inverse, so sums may be formed on either side).
//   Error feedback (optional): each rank keeps what its quantization lost (per hop) and adds it
//     to what it sends next step; add_residuals() hands it over exactly on a full-precision step
//     (the error reset, and every checkpoint step).
//   Weights: after the update each rank quantizes the difference between its new master shard
//     and the replicated parameters the ranks agree on, all-gathers those messages and every
//     rank adds every dequantized difference, its own too, so all replicas hold identical
//     values; what the quantization lost is still in the next step's difference. With
//     `weight_diff` false the master values themselves are quantized (the naive scheme).
// Which values are compressed is the caller's per-tensor choice, given as runs per part.
//
// Host buffers only (the MPI path); the optimizer refuses compression on a device backend.
// Threading: as the communicator's (one thread).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "parallel/wire_quant.h"

namespace ms::parallel {

struct CompressConfig {
  int grad_bits = 0;   // 0: full precision; 8 or 4 (one level)
  bool two_level = false;  // 8 bits within a node, inter_bits across (grad_bits ignored)
  int inter_bits = 4;
  int64_t group_size = 2048;        // weights, one-level and intra-node gradients
  int64_t inter_group_size = 128;   // the gradients' inter-node hop
  bool hadamard = false;
  bool error_feedback = false;
  int weight_bits = 0;  // 0: full precision; 8 or 4
  int64_t weight_group_size = 2048;
  bool weight_diff = true;
  bool stochastic = true;
  uint64_t seed = 0;
  bool grads_on() const { return grad_bits != 0 || two_level; }
};

// One bucket: `part_runs[r]` tells which values of part r (offsets relative to the part) are
// compressed; each part's runs cover its P values.
struct CompressedBucket {
  int64_t part_numel = 0;
  std::vector<std::vector<WireRun>> part_runs;
};

// Bytes this rank sent to other ranks (its messages to itself are not counted), and what full
// precision would have sent for the same exchanges (f32 parts to every other rank).
struct CompressedTraffic {
  uint64_t grad_bytes = 0;
  uint64_t grad_inter_node_bytes = 0;  // the part of grad_bytes sent to other nodes
  uint64_t weight_bytes = 0;
  uint64_t full_precision_bytes = 0;
  void add(const CompressedTraffic& other);
};

class CompressedDataParallel {
 public:
  // Collective over `dp` (kept by reference). `node_of_rank[r]`: the node of dp rank r (only
  // two-level reads it; InvalidArgument naming the counts when the nodes hold different numbers
  // of dp ranks).
  static Result<std::unique_ptr<CompressedDataParallel>> create(
      comm::Communicator& dp, const std::vector<int>& node_of_rank, const CompressConfig& config,
      std::vector<CompressedBucket> buckets);
  ~CompressedDataParallel();

  // Starts the reduce-scatter of `bucket`: `grads` (dp * P values; with error feedback the
  // residual is added to them first, in place) is summed over dp into `shard` (P values, written
  // when the request completes). `step` keys the stochastic rounding.
  Result<comm::Request> reduce_scatter(size_t bucket, float* grads, float* shard, int64_t step);
  // Starts the all-gather of the updated `shard` (P values) into `values` (the bucket's dp * P
  // replicated parameters, updated when the request completes).
  Result<comm::Request> gather_weights(size_t bucket, const float* shard, float* values,
                                       int64_t step);
  // Full-precision steps: adds this rank's kept residuals of `bucket` to `grads` (dp * P) and
  // clears them, so the plain reduce-scatter delivers them exactly. The two-level hop-2 residual
  // (what requantizing a node's partial sum of part p lost) is added at part p.
  void add_residuals(size_t bucket, float* grads);

  // What this rank sent since the last take.
  CompressedTraffic take_traffic();
  const CompressConfig& config() const { return config_; }
  int nodes() const { return nodes_; }

 private:
  class GradExchange;
  class WeightExchange;
  CompressedDataParallel(comm::Communicator& dp, CompressConfig config,
                         std::vector<CompressedBucket> buckets);
  Status build_levels(const std::vector<int>& node_of_rank);

  comm::Communicator& dp_;
  CompressConfig config_;
  std::vector<CompressedBucket> buckets_;
  // Two levels: this node's dp ranks, and one rank per node with this rank's local index; and
  // owner_[l][n], the dp rank at local index l of node n.
  std::unique_ptr<comm::Communicator> local_;
  std::unique_ptr<comm::Communicator> cross_;
  std::vector<std::vector<int>> owner_;
  int nodes_ = 1;
  std::vector<int> node_of_rank_;
  std::vector<std::vector<float>> residual_;        // per bucket: dp * P (error feedback)
  std::vector<std::vector<float>> inter_residual_;  // per bucket: nodes * P (two levels)
  CompressedTraffic traffic_;
};

}  // namespace ms::parallel
