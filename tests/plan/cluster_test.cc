// Cluster files: what they hold, and that every refusal names the key and the file.
#include "plan/cluster.h"
#include "plan/op_costs.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace ms::plan {
namespace {

const char* kValid = R"(
name: test
ranks: 16
ranks_per_node: 8
memory_per_rank_gib: 80
device:
  name: gpu
  dtype: bf16
  peak_tflops: {bf16: 989, f32: 67}
  memory_bandwidth_gbs: 3350
  gemm_efficiency: {max: 0.8, half_gflop: 2}
links:
  intra_node: {bandwidth_gbs: 450, latency_us: 3}
  inter_node: {bandwidth_gbs: 50, latency_us: 6}
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

void expect_error(const std::string& text, const std::string& needle) {
  Result<Cluster> c = cluster_from_yaml_text(text, "c.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("c.yaml: "), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
}

TEST(Cluster, ReadsEveryKey) {
  Result<Cluster> c = cluster_from_yaml_text(kValid, "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->ranks, 16);
  EXPECT_EQ(c->ranks_per_node, 8);
  EXPECT_EQ(c->devices_per_node, 8);  // defaults to ranks_per_node
  EXPECT_DOUBLE_EQ(c->peak_flops(), 989e12);
  EXPECT_EQ(c->bytes_per_element(), 2);
  EXPECT_DOUBLE_EQ(c->device.gemm.max, 0.8);
  EXPECT_DOUBLE_EQ(c->inter_node.bandwidth_gbs, 50);
  EXPECT_DOUBLE_EQ(c->intra_node.latency_us, 3);
}

TEST(Cluster, RoundTripsThroughYaml) {
  Result<Cluster> c = cluster_from_yaml_text(kValid, "c.yaml");
  ASSERT_TRUE(c.ok());
  c->device.gemm.points = {{0.001, 50}, {1, 90}};
  c->device.measured["gemm 8x8x8"] = 1e-6;
  c->device.adamw_ns_per_element = 6.5;
  c->device.swiglu_forward_ns_per_element = 7;
  c->device.swiglu_backward_ns_per_element = 8.25;
  c->device.measured[layer_key(4, 128, true)] = 2.5e-2;
  c->oversubscribed = {0.4, 800};
  Result<Cluster> back = cluster_from_yaml_text(cluster_to_yaml(*c), "again.yaml");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->device.gemm.points.size(), 2u);
  EXPECT_DOUBLE_EQ(back->device.measured.at("gemm 8x8x8"), 1e-6);
  EXPECT_DOUBLE_EQ(back->memory_per_rank_gib, 80);
  EXPECT_DOUBLE_EQ(back->device.adamw_ns_per_element, 6.5);
  EXPECT_DOUBLE_EQ(back->device.swiglu_forward_ns_per_element, 7);
  EXPECT_DOUBLE_EQ(back->device.swiglu_backward_ns_per_element, 8.25);
  EXPECT_DOUBLE_EQ(back->device.measured.at("layer_bwd 4x128"), 2.5e-2);
  EXPECT_DOUBLE_EQ(back->oversubscribed.bandwidth_gbs, 0.4);
  EXPECT_DOUBLE_EQ(back->oversubscribed.latency_us, 800);
  // Not measured: absent from the file, and read back as 0 (memory traffic only).
  EXPECT_EQ(cluster_to_yaml(*cluster_from_yaml_text(kValid, "c.yaml")).find("ns_per_element"),
            std::string::npos);
  EXPECT_EQ(cluster_to_yaml(*cluster_from_yaml_text(kValid, "c.yaml")).find("oversubscribed"),
            std::string::npos);
}

TEST(Cluster, MissingKeysAreNamed) {
  expect_error(replace(kValid, "ranks: 16\n", ""), "ranks is required");
  expect_error(replace(kValid, "  memory_bandwidth_gbs: 3350\n", ""),
               "device.memory_bandwidth_gbs is required");
  expect_error(replace(kValid, "  inter_node: {bandwidth_gbs: 50, latency_us: 6}\n", ""),
               "links.inter_node is required: ranks (16) span more than one node of 8");
  expect_error(replace(kValid, "bf16: 989, ", ""), "device.peak_tflops.bf16 is required");
}

TEST(Cluster, BadValuesAreNamed) {
  expect_error(replace(kValid, "ranks: 16", "ranks: many"), "ranks must be an integer");
  expect_error(replace(kValid, "ranks: 16", "ranks: 0"), "ranks must be at least 1 (got 0)");
  expect_error(replace(kValid, "dtype: bf16", "dtype: int4"),
               "device.dtype must be f32, bf16 or fp8");
  expect_error(replace(kValid, "max: 0.8", "max: 1.5"),
               "device.gemm_efficiency.max must be at most 1");
  expect_error(replace(kValid, "bandwidth_gbs: 450", "bandwidth_gbs: -1"),
               "links.intra_node.bandwidth_gbs must be at least");
}

TEST(Cluster, UnknownKeysAreRefused) {
  expect_error(replace(kValid, "ranks: 16", "ranks: 16\nrank_per_node: 8"),
               "rank_per_node is not a cluster-file key");
  expect_error(replace(kValid, "latency_us: 3}", "latency_us: 3, lat: 1}"),
               "links.intra_node.lat is not a cluster-file key");
}

TEST(Cluster, MeasuredOpsAreCheckedEachNamingItsKey) {
  const auto with_op = [](const std::string& entry) {
    return replace(kValid,
                   "  gemm_efficiency:", "  measured_ops: {" + entry + "}\n  gemm_efficiency:");
  };
  ASSERT_TRUE(
      cluster_from_yaml_text(with_op("\"gemm 8x8x8\": 1e-6, \"attn_fwd 1x8x2x2x4x0\": 2e-6, "
                                     "\"layer_bwd 4x128\": 0.5"),
                             "c.yaml")
          .ok());
  expect_error(with_op("\"gemm 8x8x8\": .nan"),
               "device.measured_ops.gemm 8x8x8 must be a positive, finite number of seconds "
               "(got nan)");
  expect_error(with_op("\"gemm 8x8x8\": -1"), "device.measured_ops.gemm 8x8x8 must be a positive");
  expect_error(with_op("\"gemm 8x8x8\": 0"), "device.measured_ops.gemm 8x8x8 must be a positive");
  expect_error(with_op("\"gemm 8x8x8\": .inf"), "must be a positive, finite number of seconds");
  expect_error(with_op("\"gemm 8x8x8\": fast"), "device.measured_ops.gemm 8x8x8 must be seconds");
  for (const char* key : {"gemm 8x8", "gemm 8x8x8x8", "gemm -8x8x8", "gemm 0x8x8", "gemm 8x8x8 ",
                          "gemm 8xx8", "gemm  8x8x8", "gem 8x8x8", "attn_fwd 1x8x2x2x4",
                          "layer_fwd 4", "layer_fwd 4x0", "gemm 99999999999999999999x1x1", "x"}) {
    expect_error(with_op("\"" + std::string(key) + "\": 1e-6"),
                 "device.measured_ops." + std::string(key) + " is not an op shape");
  }
  const std::string concurrent = replace(kValid, "  gemm_efficiency:",
                                         "  measured_ops_concurrent: {\"gemm 8x8x8\": -2}\n"
                                         "  gemm_efficiency:");
  expect_error(concurrent, "device.measured_ops_concurrent.gemm 8x8x8 must be a positive");
}

TEST(Cluster, NonRegularFilesAreRefusedNamingThePath) {
  Result<Cluster> c = load_cluster("/dev/zero");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "cluster file '/dev/zero' is a character device, not a regular file");
}

TEST(Cluster, MissingFileIsNotFound) {
  Result<Cluster> c = load_cluster("/nonexistent/cluster.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("/nonexistent/cluster.yaml"), std::string::npos);
}

TEST(Cluster, ShippedProfilesLoad) {
  const char* src = std::getenv("MS_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  for (const char* name : {"cpu-2core.yaml", "h100-8x.yaml", "h200-8x.yaml", "a100-8x.yaml"}) {
    Result<Cluster> c = load_cluster(std::string(src) + "/configs/clusters/" + name);
    EXPECT_TRUE(c.ok()) << name << ": " << c.status().to_string();
  }
}

}  // namespace
}  // namespace ms::plan

namespace ms::plan {
namespace {

// `ms-diagnose check --json` output (diag/check_report.cc's layout), two ranks on one host.
const char* kCheckJson = R"({
  "ranks": [{"rank": 0, "host": "n1", "metrics": {}}, {"rank": 1, "host": "n1", "metrics": {}}],
  "collectives": [
    {"collective": "all_gather", "rows": [{"size": 8, "out_of_place": {"time_us": 1, "busbw_gbs": 1}}]},
    {"collective": "all_reduce", "rows": [
      {"size": 8, "count": 2, "type": "float", "root": -1,
       "out_of_place": {"time_us": 12.0, "algbw_gbs": 0.0, "busbw_gbs": 0.0, "wrong": 0}, "in_place": null},
      {"size": 67108864, "count": 16777216, "type": "float", "root": -1,
       "out_of_place": {"time_us": 60000.0, "algbw_gbs": 1.1, "busbw_gbs": 1.25, "wrong": 0}, "in_place": null}]}
  ]
})";

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

TEST(Cluster, TakesLinksFromDiagnoseCheckJson) {
  Result<Cluster> c = cluster_from_yaml_text(kValid, "c.yaml");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(apply_diagnose_check(write_temp("check.json", kCheckJson), *c).ok());
  // One host: the intra-node link; the bus bandwidth of the largest size, the latency of the
  // smallest over its 2 (n - 1) = 2 ring steps.
  EXPECT_DOUBLE_EQ(c->intra_node.bandwidth_gbs, 1.25);
  EXPECT_DOUBLE_EQ(c->intra_node.latency_us, 6.0);
  EXPECT_DOUBLE_EQ(c->inter_node.bandwidth_gbs, 50);  // untouched
  std::string two_hosts = kCheckJson;
  two_hosts.replace(two_hosts.find("\"n1\", \"metrics\": {}}]"), 4, "\"n2\"");
  Result<Cluster> d = cluster_from_yaml_text(kValid, "c.yaml");
  ASSERT_TRUE(apply_diagnose_check(write_temp("check2.json", two_hosts), *d).ok());
  EXPECT_DOUBLE_EQ(d->inter_node.bandwidth_gbs, 1.25);
  EXPECT_DOUBLE_EQ(d->intra_node.bandwidth_gbs, 450);
}

TEST(Cluster, RefusesJsonThatIsNotACheck) {
  Result<Cluster> c = cluster_from_yaml_text(kValid, "c.yaml");
  ASSERT_TRUE(c.ok());
  Status s = apply_diagnose_check(write_temp("other.json", R"({"steps": []})"), *c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not `ms-diagnose check --json` output"), std::string::npos)
      << s.message();
  EXPECT_FALSE(apply_diagnose_check(write_temp("bad.json", "{"), *c).ok());
  EXPECT_EQ(apply_diagnose_check("/nonexistent/check.json", *c).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ms::plan
