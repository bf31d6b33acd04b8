// Shared fixtures of the planner tests: a small test cluster and a small dense model.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "config/run_config.h"
#include "plan/cluster.h"

namespace ms::plan::fixtures {

// `ranks` ranks, 4 per node, `memory_gib` each, a 0.1 TFLOP/s f32 device and intra-node links
// of `bandwidth_gbs` and `latency_us` (inter-node 0.2 GB/s, 20 us).
inline Cluster test_cluster(int ranks, double memory_gib, double bandwidth_gbs = 1,
                            double latency_us = 5) {
  Result<Cluster> c = cluster_from_yaml_text(
      "name: test\nranks: " + std::to_string(ranks) +
          "\nranks_per_node: 4\nmemory_per_rank_gib: " + std::to_string(memory_gib) +
          "\ndevice: {name: d, dtype: f32, peak_tflops: {f32: 0.1}, memory_bandwidth_gbs: 10,"
          " gemm_efficiency: {max: 0.9, half_gflop: 0.001}}\n"
          "links:\n  intra_node: {bandwidth_gbs: " +
          std::to_string(bandwidth_gbs) + ", latency_us: " + std::to_string(latency_us) +
          "}\n  inter_node: {bandwidth_gbs: 0.2, latency_us: 20}\n",
      "test.yaml");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

// 4 layers of d_model 128, 1024-token vocabulary, 128-token sequences, 16 per step in 4s.
inline config::RunConfig small_model() {
  config::RunConfig c;
  c.model.vocab_size = 1024;
  c.model.d_model = 128;
  c.model.n_layers = 4;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 4;
  c.model.d_ff = 352;
  c.model.max_seq_len = 128;
  c.train.seq_len = 128;
  c.train.global_batch = 16;
  c.train.micro_batch = 4;
  return c;
}

}  // namespace ms::plan::fixtures
