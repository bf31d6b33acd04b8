// Verdict logic of `ms-diagnose check`; the two-condition rule is explained in health.h.
#include "diag/health.h"

#include <algorithm>
#include <set>

#include "diag/robust_stats.h"

namespace ms::diag {

namespace {

using telemetry::GroupBy;

std::set<std::string> metric_names(std::span<const RankMeasurement> ranks) {
  std::set<std::string> names;
  for (const RankMeasurement& r : ranks) {
    for (const auto& [name, value] : r.metrics) names.insert(name);
  }
  return names;
}

// Machines in order of their lowest rank, each with its ranks.
std::vector<MachineVerdict> machines_of(std::span<const RankMeasurement> ranks, GroupBy group_by) {
  std::vector<const RankMeasurement*> sorted;
  for (const RankMeasurement& r : ranks) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->rank < b->rank; });
  std::vector<MachineVerdict> machines;
  for (const RankMeasurement* r : sorted) {
    const std::string key = telemetry::group_key(r->host, r->rank, group_by);
    auto it = std::find_if(machines.begin(), machines.end(),
                           [&](const MachineVerdict& m) { return m.machine == key; });
    if (it == machines.end()) {
      machines.push_back(MachineVerdict{key, {}, false, {}, {}});
      it = machines.end() - 1;
    }
    it->ranks.push_back(r->rank);
  }
  return machines;
}

MachineVerdict& machine_of_rank(std::vector<MachineVerdict>& machines, int rank) {
  for (MachineVerdict& m : machines) {
    if (std::find(m.ranks.begin(), m.ranks.end(), rank) != m.ranks.end()) return m;
  }
  return machines.front();  // unreachable: every rank was placed by machines_of
}

void flag(MachineVerdict& machine, Finding finding) {
  machine.suspect = true;
  machine.findings.push_back(std::move(finding));
}

void assess_ranks(std::span<const RankMeasurement> ranks, const std::string& metric,
                  const HealthOptions& options, std::vector<MachineVerdict>& machines) {
  std::vector<double> population;
  for (const RankMeasurement& r : ranks) {
    auto it = r.metrics.find(metric);
    if (it != r.metrics.end()) population.push_back(it->second);
  }
  for (const RankMeasurement& r : ranks) {
    auto it = r.metrics.find(metric);
    Finding finding;
    if (it == r.metrics.end() || !is_suspect_value(it->second, population, options, finding)) {
      continue;
    }
    finding.subject = "rank" + std::to_string(r.rank);
    finding.metric = metric;
    flag(machine_of_rank(machines, r.rank), std::move(finding));
  }
}

// A machine's value for a metric: the median over its ranks that measured it.
bool machine_value(std::span<const RankMeasurement> ranks, const MachineVerdict& machine,
                   const std::string& metric, double& value) {
  std::vector<double> values;
  for (const RankMeasurement& r : ranks) {
    auto it = r.metrics.find(metric);
    const bool mine = std::find(machine.ranks.begin(), machine.ranks.end(), r.rank) !=
                      machine.ranks.end();
    if (mine && it != r.metrics.end()) values.push_back(it->second);
  }
  if (values.empty()) return false;
  value = median(values);
  return true;
}

void assess_machines(std::span<const RankMeasurement> ranks, const std::string& metric,
                     const HealthOptions& options, std::vector<MachineVerdict>& machines) {
  std::vector<double> population(machines.size());
  std::vector<bool> has(machines.size());
  std::vector<double> present;
  for (size_t i = 0; i < machines.size(); ++i) {
    has[i] = machine_value(ranks, machines[i], metric, population[i]);
    if (has[i]) present.push_back(population[i]);
  }
  for (size_t i = 0; i < machines.size(); ++i) {
    Finding finding;
    if (!has[i] || !is_suspect_value(population[i], present, options, finding)) continue;
    finding.subject = machines[i].machine;
    finding.metric = metric;
    flag(machines[i], std::move(finding));
  }
}

}  // namespace

bool HealthReport::any_suspect() const {
  return std::any_of(machines.begin(), machines.end(),
                     [](const MachineVerdict& m) { return m.suspect; });
}

bool is_suspect_value(double value, std::span<const double> population,
                      const HealthOptions& options, Finding& finding) {
  if (population.size() < kMinPeers) return false;
  const double center = median(population);
  if (!(center > 0)) return false;
  finding.value = value;
  finding.median = center;
  finding.robust_z = robust_z(value, center, median_absolute_deviation(population));
  finding.degradation = (center - value) / center;
  return finding.robust_z <= -options.z_threshold &&
         finding.degradation >= options.min_degradation;
}

HealthReport assess_health(std::span<const RankMeasurement> ranks, const HealthOptions& options) {
  HealthReport report;
  if (ranks.empty()) return report;
  report.machines = machines_of(ranks, options.group_by);
  for (const RankMeasurement& r : ranks) {
    MachineVerdict& machine = machine_of_rank(report.machines, r.rank);
    for (const std::string& fault : r.faults) {
      machine.suspect = true;
      machine.faults.push_back("rank" + std::to_string(r.rank) + ": " + fault);
    }
  }
  const bool shared_machines = report.machines.size() < ranks.size();
  for (const std::string& metric : metric_names(ranks)) {
    assess_ranks(ranks, metric, options, report.machines);
    if (shared_machines) assess_machines(ranks, metric, options, report.machines);
  }
  return report;
}

}  // namespace ms::diag
