// Op times from measurements or the device profile; see op_costs.h.
#include "plan/op_costs.h"

#include <algorithm>
#include <cmath>

namespace ms::plan {

std::string gemm_key(int64_t m, int64_t n, int64_t k) {
  return "gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

std::string attention_key(const AttentionOp& a, bool backward) {
  return std::string(backward ? "attn_bwd " : "attn_fwd ") + std::to_string(a.batch) + "x" +
         std::to_string(a.seq) + "x" + std::to_string(a.heads) + "x" + std::to_string(a.kv_heads) +
         "x" + std::to_string(a.head_dim) + "x" + std::to_string(a.window);
}

std::string layer_key(int64_t batch, int64_t seq, bool backward) {
  return std::string(backward ? "layer_bwd " : "layer_fwd ") + std::to_string(batch) + "x" +
         std::to_string(seq);
}

// Causal: a query at position i sees min(i + 1, window) keys; QK^T and PV cost 2 flops per
// multiply-add each; the backward computes four such products (dV, dP, dQ, dK) plus the
// recomputed scores: 2.5 times the forward.
double attention_flops(const AttentionOp& a, bool backward) {
  double visible = 0;
  for (int64_t i = 0; i < a.seq; ++i) {
    visible += static_cast<double>(a.window == 0 ? i + 1 : std::min(i + 1, a.window));
  }
  const double fwd = 4.0 * static_cast<double>(a.batch * a.heads * a.head_dim) * visible;
  return backward ? 2.5 * fwd : fwd;
}

std::string cp_attention_key(const AttentionOp& a, int cp, bool backward) {
  return "cp_" + attention_key(a, backward) + "x" + std::to_string(cp);
}

CostModel::CostModel(const Cluster& cluster, int ranks_on_node, Scaling scaling)
    : cluster_(cluster), scaling_(scaling) {
  oversubscription_ =
      std::min(1.0, static_cast<double>(cluster.devices_per_node) / std::max(1, ranks_on_node));
  concurrent_ = ranks_on_node > 1;
  oversubscribed_ = ranks_on_node > cluster.devices_per_node;
  share_ = oversubscription_ * (concurrent_ ? cluster.concurrency_efficiency : 1.0);
}

double CostModel::curve_rate(double flops) const {
  const GemmCurve& g = cluster_.device.gemm;
  const double gflop = flops / 1e9;
  if (!g.points.empty()) {
    if (gflop <= g.points.front().first) return g.points.front().second * 1e9;
    if (gflop >= g.points.back().first) return g.points.back().second * 1e9;
    for (size_t i = 1; i < g.points.size(); ++i) {
      const auto& [f1, r1] = g.points[i];
      if (gflop > f1) continue;
      const auto& [f0, r0] = g.points[i - 1];
      const double t = std::log(gflop / f0) / std::log(f1 / f0);
      return (r0 + t * (r1 - r0)) * 1e9;
    }
  }
  const double eff = g.half_gflop > 0 ? g.max * gflop / (gflop + g.half_gflop) : g.max;
  return cluster_.peak_flops() * eff;
}

double CostModel::measured_or(const std::string& key, double derived) const {
  if (record_) record_->insert(key);
  if (concurrent_) {
    const auto it = cluster_.device.measured_concurrent.find(key);
    if (it != cluster_.device.measured_concurrent.end()) {
      return it->second / oversubscription_ / scaling_.compute;
    }
  }
  const auto it = cluster_.device.measured.find(key);
  const double seconds = it != cluster_.device.measured.end() ? it->second : derived;
  return seconds / share_ / scaling_.compute;
}

double CostModel::gemm_seconds(int64_t m, int64_t n, int64_t k) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  return measured_or(gemm_key(m, n, k), flops / curve_rate(flops));
}

double CostModel::attention_seconds(const AttentionOp& a, bool backward) const {
  const double flops = attention_flops(a, backward);
  const double rate = curve_rate(flops) * cluster_.device.attention_efficiency;
  return measured_or(attention_key(a, backward), flops / rate);
}

double CostModel::measured_layer_seconds(int64_t batch, int64_t seq, bool backward) const {
  return measured_or(layer_key(batch, seq, backward), 0.0);
}

double CostModel::measured_cp_attention_seconds(const AttentionOp& a, int cp,
                                                bool backward) const {
  const std::string key = cp_attention_key(a, cp, backward);
  if (record_) record_->insert(key);
  const auto it = cluster_.device.measured.find(key);
  if (it == cluster_.device.measured.end()) return 0;
  const double devices = std::max(1, cluster_.devices_per_node);
  const double measured_share =
      std::min(1.0, devices / cp) * (cp > 1 ? cluster_.concurrency_efficiency : 1.0);
  return it->second * measured_share / share_ / scaling_.compute;
}

std::optional<DpReductionCost> CostModel::dp_reduction_cost() const {
  if (oversubscribed_ && cluster_.dp_cost_oversubscribed) return cluster_.dp_cost_oversubscribed;
  return cluster_.dp_cost;
}

double CostModel::elementwise_seconds(double bytes) const {
  return bytes / (cluster_.device.memory_bandwidth_gbs * 1e9) / share_ / scaling_.compute;
}

double CostModel::per_element_seconds(double elements, double ns_per_element) const {
  return elements * ns_per_element * 1e-9 / share_ / scaling_.compute;
}

double CostModel::comm_seconds(Collective op, double bytes, int n, bool inter_node) const {
  Link link = inter_node ? cluster_.inter_node : cluster_.intra_node;
  if (!inter_node && oversubscribed_ && cluster_.oversubscribed.bandwidth_gbs > 0) {
    link = cluster_.oversubscribed;
  }
  link.bandwidth_gbs *= scaling_.net;
  link.latency_us /= scaling_.net;
  return collective_seconds(link, op, bytes, n);
}

}  // namespace ms::plan
