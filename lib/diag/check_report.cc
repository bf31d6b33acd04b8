// Text and JSON renderings of a check run; see check_report.h.
#include "diag/check_report.h"

#include <cmath>
#include <cstdio>

namespace ms::diag {

namespace {

using nlohmann::ordered_json;

std::string format_ranks(const CheckResults& results) {
  std::string out = "#\n# Per-rank measurements (best of repetitions and rounds, one rank at a time)\n";
  char line[256];
  std::snprintf(line, sizeof(line), "# %6s  %-20s %12s %10s %12s %12s\n", "rank", "host",
                "sgemm GF/s", "triad GB/s", "p2p out GB/s", "p2p in GB/s");
  out += line;
  for (const RankMeasurement& r : results.ranks) {
    auto metric = [&](const char* name) {
      auto it = r.metrics.find(name);
      return it == r.metrics.end() ? std::nan("") : it->second;
    };
    // A rank alone has no point-to-point peers: NaN prints as "nan", which reads as missing.
    std::snprintf(line, sizeof(line), "  %6d  %-20s %12.2f %10.2f %12.3f %12.3f\n", r.rank,
                  r.host.c_str(), metric("sgemm_gflops"), metric("triad_gbs"),
                  metric("p2p_send_gbs"), metric("p2p_recv_gbs"));
    out += line;
    // The GPU probes (gpu_check.h), when the rank has a GPU, on a line of their own.
    std::string gpu;
    for (const auto& [name, value] : r.metrics) {
      if (name.rfind("gpu_", 0) != 0) continue;
      std::snprintf(line, sizeof(line), " %s %.1f", name.c_str() + 4, value);
      gpu += line;
    }
    if (!gpu.empty()) out += "          gpu:" + gpu + "\n";
  }
  return out;
}

std::string format_p2p(const P2pMatrix& m, const std::vector<SlowLink>& slow) {
  if (m.ranks < 2) return "#\n# Point-to-point matrix: needs at least 2 ranks\n";
  std::string out = "#\n# Point-to-point bandwidth (GB/s), row = sender, column = receiver\n# src\\dst";
  char cell[64];
  for (int d = 0; d < m.ranks; ++d) {
    std::snprintf(cell, sizeof(cell), " %8d", d);
    out += cell;
  }
  out += "\n";
  for (int s = 0; s < m.ranks; ++s) {
    std::snprintf(cell, sizeof(cell), "  %7d", s);
    out += cell;
    for (int d = 0; d < m.ranks; ++d) {
      if (s == d) {
        out += "        -";
      } else {
        std::snprintf(cell, sizeof(cell), " %8.3f", m.at(s, d));
        out += cell;
      }
    }
    out += "\n";
  }
  for (const SlowLink& l : slow) {
    std::snprintf(cell, sizeof(cell), "# slow link %d->%d: %.3f GB/s, %.0f%% below median %.3f\n",
                  l.src, l.dst, l.finding.value, 100 * l.finding.degradation, l.finding.median);
    out += cell;
  }
  return out;
}

std::string format_findings(const MachineVerdict& m) {
  std::string out;
  char line[256];
  for (const Finding& f : m.findings) {
    std::snprintf(line, sizeof(line), "      %s %s = %.3f, %.0f%% below median %.3f (robust z %.1f)\n",
                  f.subject.c_str(), f.metric.c_str(), f.value, 100 * f.degradation, f.median,
                  f.robust_z);
    out += line;
  }
  return out;
}

std::string format_verdict(const CheckVerdict& verdict, const CheckOptions& options) {
  std::string out = "#\n# Verdict per machine\n";
  for (const MachineVerdict& m : verdict.health.machines) {
    std::string ranks;
    for (int r : m.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    out += "  " + m.machine + " (ranks " + ranks + "): " + (m.suspect ? "SUSPECT" : "healthy") +
           "\n" + format_findings(m);
    for (const std::string& fault : m.faults) out += "      " + fault + "\n";
  }
  if (!verdict.suspect_nodes.empty()) {
    const std::string list = node_list(verdict.suspect_nodes);
    out += "# Suspect nodes: " + list + "  (sbatch --exclude=" + list + ")\n";
  }
  if (verdict.health.machines.size() < kMinPeers) {
    out += "# note: fewer than 3 machines, so none can be singled out as an outlier\n";
  }
  if (options.injection.rank >= 0) {
    out += "# note: test-only slowdown x" + std::to_string(options.injection.factor) +
           " injected on rank " + std::to_string(options.injection.rank) + "\n";
  }
  out += std::string("# Out of bounds values : ") + std::to_string(verdict.wrong) +
         (verdict.wrong == 0 ? " OK\n" : " FAILED\n");
  for (const SlowCollective& s : verdict.below_min_busbw) {
    char line[160];
    std::snprintf(line, sizeof(line), "# %s%s: peak busbw %.3f GB/s is below --min-busbw %.3f\n",
                  std::string(collective_name(s.collective)).c_str(), s.nccl ? " (NCCL)" : "",
                  s.peak_busbw_gbs, verdict.min_busbw_gbs);
    out += line;
  }
  out += std::string("# Result: ") + (verdict.healthy() ? "HEALTHY" : "SUSPECT FOUND") + "\n";
  return out;
}

ordered_json finding_json(const Finding& f) {
  ordered_json j;
  j["subject"] = f.subject;
  j["metric"] = f.metric;
  j["value"] = f.value;
  j["median"] = f.median;
  j["robust_z"] = std::isfinite(f.robust_z) ? ordered_json(f.robust_z) : ordered_json("-inf");
  j["degradation"] = f.degradation;
  return j;
}

// A placement's numbers, or null where the collective has no such form.
ordered_json placement_json(const PlacementResult& p) {
  if (!p.measured) return nullptr;
  return {{"time_us", p.time_us}, {"algbw_gbs", p.algbw_gbs}, {"busbw_gbs", p.busbw_gbs},
          {"wrong", p.wrong}};
}

ordered_json collectives_json(const std::vector<std::vector<CollectiveResult>>& collectives,
                              const CheckOptions& options) {
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < collectives.size(); ++i) {
    ordered_json rows = ordered_json::array();
    for (const CollectiveResult& r : collectives[i]) {
      rows.push_back({{"size", r.bytes}, {"count", r.count}, {"type", "float"},
                      {"root", r.root}, {"out_of_place", placement_json(r.out_of_place)},
                      {"in_place", placement_json(r.in_place)}});
    }
    out.push_back({{"collective", collective_name(options.collectives[i])}, {"rows", rows}});
  }
  return out;
}

ordered_json machines_json(const CheckVerdict& verdict) {
  ordered_json out = ordered_json::array();
  for (const MachineVerdict& m : verdict.health.machines) {
    ordered_json findings = ordered_json::array();
    for (const Finding& f : m.findings) findings.push_back(finding_json(f));
    out.push_back({{"machine", m.machine}, {"ranks", m.ranks}, {"suspect", m.suspect},
                   {"findings", findings}, {"faults", m.faults}});
  }
  return out;
}

}  // namespace

CheckVerdict judge_check(const CheckResults& results, const CheckOptions& check_options,
                         const HealthOptions& options) {
  CheckVerdict verdict;
  verdict.min_busbw_gbs = check_options.min_busbw_gbs;
  const int ranks = static_cast<int>(results.ranks.size());
  const bool nccl = !results.nccl_collectives.empty();
  const auto& judged = nccl ? results.nccl_collectives : results.collectives;
  for (size_t i = 0; i < judged.size() && i < check_options.collectives.size(); ++i) {
    const Collective c = check_options.collectives[i];
    const double peak = peak_busbw_gbs(judged[i]);
    if (check_options.min_busbw_gbs > 0 && ranks > 1 &&
        peak < check_options.min_busbw_gbs) {
      verdict.below_min_busbw.push_back({c, peak, nccl});
    }
  }
  for (const auto& rows : results.nccl_collectives) {
    for (const CollectiveResult& r : rows) verdict.wrong += r.wrong();
  }
  verdict.health = assess_health(results.ranks, options);
  verdict.slow_links = find_slow_links(results.p2p, options);
  verdict.suspect_nodes = suspect_nodes(verdict.health, results.ranks);
  for (const auto& rows : results.collectives) {
    for (const CollectiveResult& r : rows) verdict.wrong += r.wrong();
  }
  return verdict;
}

std::string format_check_report(const CheckResults& results, const CheckOptions& options,
                                const CheckVerdict& verdict) {
  std::string out = "# ms-diagnose check: " + std::to_string(results.ranks.size()) + " rank(s)\n";
  out += format_ranks(results);
  for (size_t i = 0; i < results.collectives.size(); ++i) {
    out += format_collective_table(options.collectives[i], static_cast<int>(results.ranks.size()),
                                   results.collectives[i]);
  }
  if (!results.nccl_skipped.empty()) {
    out += "#\n# NCCL collectives skipped: " + results.nccl_skipped + "\n";
  }
  for (size_t i = 0; i < results.nccl_collectives.size(); ++i) {
    out += "#\n# NCCL on GPU buffers, one rank per GPU (in place: N/A for alltoall and sendrecv)";
    out += format_collective_table(options.collectives[i], static_cast<int>(results.ranks.size()),
                                   results.nccl_collectives[i]);
  }
  out += format_p2p(results.p2p, verdict.slow_links);
  out += format_verdict(verdict, options);
  return out;
}

ordered_json check_report_json(const CheckResults& results, const CheckOptions& options,
                               const HealthOptions& health_options, const CheckVerdict& verdict) {
  ordered_json doc;
  doc["ranks"] = ordered_json::array();
  for (const RankMeasurement& r : results.ranks) {
    doc["ranks"].push_back({{"rank", r.rank}, {"host", r.host}, {"metrics", r.metrics}});
  }
  doc["collectives"] = collectives_json(results.collectives, options);
  if (!results.nccl_collectives.empty()) {
    doc["nccl_collectives"] = collectives_json(results.nccl_collectives, options);
  }
  if (!results.nccl_skipped.empty()) doc["nccl_skipped"] = results.nccl_skipped;
  doc["p2p_gbs"] = results.p2p.gbs;
  ordered_json links = ordered_json::array();
  for (const SlowLink& l : verdict.slow_links) links.push_back(finding_json(l.finding));
  doc["slow_links"] = links;
  doc["z_threshold"] = health_options.z_threshold;
  doc["min_degradation"] = health_options.min_degradation;
  doc["group_by"] = telemetry::group_by_name(health_options.group_by);
  doc["machines"] = machines_json(verdict);
  doc["suspect_nodes"] = verdict.suspect_nodes;
  doc["wrong"] = verdict.wrong;
  doc["min_busbw_gbs"] = verdict.min_busbw_gbs;
  ordered_json slow = ordered_json::array();
  for (const SlowCollective& s : verdict.below_min_busbw) {
    slow.push_back({{"collective", collective_name(s.collective)},
                    {"peak_busbw_gbs", s.peak_busbw_gbs}, {"nccl", s.nccl}});
  }
  doc["below_min_busbw"] = slow;
  doc["healthy"] = verdict.healthy();
  return doc;
}

}  // namespace ms::diag
