// The cluster file of `ms-train plan` (docs/plan.md): how many ranks a job gets, how they sit on
// nodes, how much memory each has, and what the hardware does: a device profile (peak FLOP/s
// per dtype with an efficiency curve, memory bandwidth, intra- and inter-node link bandwidth and
// latency), optionally with op times measured at the exact shapes (`ms-train plan --profile`).
// Every error names the key and the file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ms::plan {

// One link class, as the busbw model of nccl-tests sees it: a collective of b bytes over n ranks
// takes latency * steps + b * factor(n) / bandwidth (comm_cost.h).
struct Link {
  double bandwidth_gbs = 0;  // bus bandwidth a collective sustains, 1e9 bytes/s
  double latency_us = 0;     // per algorithm step
};

// GEMM efficiency against flops: max * f / (f + half_gflop), f in GFLOP (1e9) per call; or,
// where measured, points (GFLOP per call, GFLOP/s achieved) interpolated in log f.
struct GemmCurve {
  double max = 1.0;
  double half_gflop = 0;
  std::vector<std::pair<double, double>> points;  // ascending in GFLOP
};

// An op measured at one shape: "gemm MxNxK" or "attn_fwd/attn_bwd BxTxHxKVxHD", seconds per call;
// or one layer of the run's model: "layer_fwd/layer_bwd BxT", seconds per layer (op_costs.h).
using MeasuredOps = std::map<std::string, double>;

struct Device {
  std::string name;
  // The dtype the GEMMs run in: f32 (weights, activations f32), bf16, or fp8 (GEMMs at the fp8
  // peak; weights and activations held in bf16, as Transformer Engine does).
  std::string dtype = "f32";
  std::map<std::string, double> peak_tflops;  // by dtype
  double memory_bandwidth_gbs = 0;
  GemmCurve gemm;
  double attention_efficiency = 0.5;  // attention's fraction of the GEMM rate at its shape
  // The trainer's per-element kernels bound by arithmetic (exp, sqrt, division), not by memory
  // traffic, measured by --profile in ns per element, one rank alone: the AdamW update
  // (train::Optimizer::step, per element updated) and SwiGLU (ops::swiglu_forward and
  // swiglu_backward, per output element). 0: not measured, costed as memory traffic.
  double adamw_ns_per_element = 0;
  double swiglu_forward_ns_per_element = 0, swiglu_backward_ns_per_element = 0;
  MeasuredOps measured;               // --profile: exact shapes, one rank alone
  // The same shapes timed with every rank of the node running them at once (shared caches and
  // memory bandwidth): used when a job has more than one rank on a node.
  MeasuredOps measured_concurrent;
};

// How the measurements of `--profile` went (absent from hand-written files: all 0).
struct ProfileQuality {
  // The timings' own spread: the median over every timed op of (upper quartile - lower
  // quartile) / lower quartile of its calls. A prediction's error band is this share of it.
  double spread = 0;
  // The share of the node's CPU time that other processes took while the profile measured
  // (its ops timed alone on rank 0), from /proc/stat less the profile's own usage.
  double load_share = 0;
  int repeated = 0;  // measurements repeated because they ran under load
};

// A profile taken while other processes held at least this share of the node's CPU: the
// predictions made from it say so.
inline constexpr double kDisturbedLoadShare = 0.1;

// The step time a data-parallel gradient reduction adds per MiB of gradients a rank reduces,
// issued as the trainer issues it (nonblocking buckets while the backward runs, then the wait),
// for each collective the trainer uses, measured over a group of `ranks`. It counts what is
// left to wait for after the backward and what the backward slowed by (a CPU moves the bytes
// inside the MPI calls of the same cores).
struct DpReductionCost {
  double reduce_scatter_s_per_mib = 0;  // ZeRO-1
  double allreduce_s_per_mib = 0;       // plain data parallelism
  int ranks = 2;
};

struct Cluster {
  std::string source;  // the file it came from
  std::string name;
  int ranks = 0;
  int ranks_per_node = 0;
  int devices_per_node = 0;  // ranks beyond this on a node share the devices (oversubscribed)
  // A rank's speed while every rank of the node computes, against one rank alone (shared memory
  // bandwidth and caches, clocks, other tenants of the machine); 1 for dedicated devices.
  double concurrency_efficiency = 1;
  double memory_per_rank_gib = 0;
  double runtime_overhead_mib = 0;  // a process's own memory (MPI, BLAS, buffers), not the model's
  bool overlap_dp = false;          // the dp gradient reduction overlaps the backward
  double step_overhead_ms = 0;      // fixed per-step cost outside the model (loader, logging)
  Device device;
  Link intra_node, inter_node;
  // The intra-node link while a node runs more ranks than devices (an oversubscribed CPU, where a
  // collective completes only once every peer is scheduled again); bandwidth 0: not measured,
  // intra_node serves. `--profile` under mpirun with more ranks than cores measures it.
  Link oversubscribed;
  ProfileQuality profile;  // `profile:` in the file
  // What the dp gradient reduction added to a step when `--profile` ran it the trainer's way on
  // this machine (profile_overlap.h), one rank per core and, where measured, every rank of an
  // oversubscribed node at once. Unset: `overlap_dp` decides, as for the shipped GPU files.
  // `overlap:` in the file.
  std::optional<DpReductionCost> dp_cost, dp_cost_oversubscribed;

  bool disturbed() const { return profile.load_share >= kDisturbedLoadShare; }
  double peak_flops() const;  // per device, in the compute dtype
  int bytes_per_element() const { return device.dtype == "f32" ? 4 : 2; }
};

// Parses the cluster file at `path`. NotFound/IOError for the file; InvalidArgument naming the
// file and the key for a missing, mistyped or out-of-range value, or an unknown key.
Result<Cluster> load_cluster(const std::string& path);
Result<Cluster> cluster_from_yaml_text(std::string_view text, const std::string& source);

// The cluster as YAML that cluster_from_yaml_text reads back (what --profile writes).
std::string cluster_to_yaml(const Cluster& cluster);

// Replaces the link figures with those measured by `ms-diagnose check --json` (file `path`): the
// all_reduce rows give the bus bandwidth (largest size) and the latency (smallest size); they
// go to the intra-node link when the check ran within one node, else to the inter-node link.
Status apply_diagnose_check(const std::string& path, Cluster& cluster);

}  // namespace ms::plan
