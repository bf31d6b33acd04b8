// libFuzzer target for `ms-train plan`'s cluster files (lib/plan/cluster.h): the bytes, read
// from a file through load_cluster (the bounded reader) and as text, must either be refused
// with a Status or give a cluster whose every number is finite and in its documented range
// (docs/plan.md: every value is checked), whose measured op keys have the documented forms,
// and which cluster_to_yaml writes back to a file the reader takes again with the same keys.
// Built with clang -fsanitize=fuzzer,address locally; CI replays tests/fuzz/corpus/cluster_file/.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "plan/cluster.h"
#include "tests/fuzz/fuzz_scratch.h"

namespace {

bool positive(double v) { return std::isfinite(v) && v > 0; }
bool non_negative(double v) { return std::isfinite(v) && v >= 0; }

// Every value the reader accepted lies in the range docs/plan.md gives it.
void check_values(const ms::plan::Cluster& c) {
  if (c.ranks < 1 || c.ranks_per_node < 1 || c.devices_per_node < 1) std::abort();
  if (!positive(c.memory_per_rank_gib) || !non_negative(c.runtime_overhead_mib)) std::abort();
  if (!positive(c.concurrency_efficiency) || c.concurrency_efficiency > 1) std::abort();
  if (!non_negative(c.step_overhead_ms)) std::abort();
  if (!positive(c.peak_flops()) || !positive(c.device.memory_bandwidth_gbs)) std::abort();
  if (!positive(c.device.gemm.max) || c.device.gemm.max > 1) std::abort();
  for (const auto& [f, rate] : c.device.gemm.points) {
    if (!positive(f) || !positive(rate)) std::abort();
  }
  for (const ms::plan::Link& l : {c.intra_node, c.inter_node}) {
    if (!positive(l.bandwidth_gbs) || !non_negative(l.latency_us)) std::abort();
  }
  for (const auto* table : {&c.device.measured, &c.device.measured_concurrent}) {
    for (const auto& [key, seconds] : *table) {
      if (!positive(seconds) || key.find(' ') == std::string::npos) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = ms::fuzz::write_scratch("cluster.yaml", text);
  const ms::Result<ms::plan::Cluster> from_file = ms::plan::load_cluster(path);
  const ms::Result<ms::plan::Cluster> c = ms::plan::cluster_from_yaml_text(text, "fuzz.yaml");
  if (from_file.ok() != c.ok()) std::abort();
  if (!c.ok()) return 0;
  check_values(*c);
  const ms::Result<ms::plan::Cluster> back =
      ms::plan::cluster_from_yaml_text(ms::plan::cluster_to_yaml(*c), "fuzz-back.yaml");
  if (!back.ok()) std::abort();
  check_values(*back);
  if (back->ranks != c->ranks || back->device.measured.size() != c->device.measured.size() ||
      back->device.measured_concurrent.size() != c->device.measured_concurrent.size()) {
    std::abort();
  }
  return 0;
}
