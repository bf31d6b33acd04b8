// The pure side of --validate; see validate.h.
#include "plan/validate.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace ms::plan {
namespace {

// What a candidate must differ in to be worth its own run.
auto shape(const Layout& l) {
  return std::make_tuple(l.dp, l.tp, l.pp, l.vpp, l.ep, l.cp, l.schedule, l.micro_batch,
                         l.pp_layers);
}

// The measured order: indices of `runs` fastest first.
std::vector<size_t> measured_order(const std::vector<ValidatedLayout>& runs) {
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return runs[a].measured_s < runs[b].measured_s; });
  return order;
}

size_t rank_of(const std::vector<size_t>& order, size_t run) {
  return static_cast<size_t>(std::find(order.begin(), order.end(), run) - order.begin()) + 1;
}

}  // namespace

std::vector<size_t> validation_candidates(const SearchResult& result, size_t count) {
  std::vector<size_t> out;
  if (result.ranked.empty() || count == 0) return out;
  out.push_back(result.recommendation.index);
  for (size_t i = 0; i < result.ranked.size() && out.size() < count; ++i) {
    const bool same = std::any_of(out.begin(), out.end(), [&](size_t j) {
      return shape(result.ranked[j].layout) == shape(result.ranked[i].layout);
    });
    if (!same) out.push_back(i);
  }
  return out;
}

Result<double> measured_step_seconds(std::vector<std::pair<int64_t, double>> steps) {
  if (steps.empty()) return InvalidArgument("the run recorded no steps");
  std::sort(steps.begin(), steps.end());
  if (steps.size() > 1) steps.erase(steps.begin());
  std::vector<double> s;
  for (const auto& [step, seconds] : steps) s.push_back(seconds);
  const auto mid = s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2);
  std::nth_element(s.begin(), mid, s.end());
  if (s.size() % 2 == 1) return *mid;
  const double upper = *mid;
  return (*std::max_element(s.begin(), mid) + upper) / 2;
}

std::string validation_text(const std::vector<ValidatedLayout>& runs, int64_t steps) {
  if (runs.empty()) return "";
  const std::vector<size_t> order = measured_order(runs);
  std::string out = "# validate: " + std::to_string(runs.size()) + " candidates trained for " +
                    std::to_string(steps) + " steps each (step: median after the first)\n";
  out += "#  measured  layout                                        predicted_s  measured_s"
         "   err%\n";
  char line[300];
  for (size_t i = 0; i < runs.size(); ++i) {
    const ValidatedLayout& r = runs[i];
    std::snprintf(line, sizeof(line), "%-2s %8zu  %-45s %11.4g %11.4g %+6.1f\n",
                  i == 0 ? "*" : "", rank_of(order, i),
                  layout_name(r.prediction.layout).c_str(), r.prediction.step_s, r.measured_s,
                  (r.prediction.step_s / r.measured_s - 1) * 100);
    out += line;
  }
  const ValidatedLayout& fastest = runs[order.front()];
  if (order.front() == 0) {
    out += "# the recommendation (*) was the fastest measured";
    if (runs.size() > 1) {
      std::snprintf(line, sizeof(line), ", %.1f%% ahead of the next",
                    (runs[order[1]].measured_s / runs[0].measured_s - 1) * 100);
      out += line;
    }
    out += "\n";
  } else {
    std::snprintf(line, sizeof(line),
                  "# the fastest measured was %s (%.4g s); the recommendation (*) measured %.1f%% "
                  "slower, %zu of %zu\n",
                  layout_name(fastest.prediction.layout).c_str(), fastest.measured_s,
                  (runs[0].measured_s / fastest.measured_s - 1) * 100, rank_of(order, 0),
                  runs.size());
    out += line;
  }
  return out;
}

nlohmann::ordered_json validation_json(const std::vector<ValidatedLayout>& runs, int64_t steps) {
  nlohmann::ordered_json doc;
  doc["steps"] = steps;
  const std::vector<size_t> order = measured_order(runs);
  doc["runs"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < runs.size(); ++i) {
    doc["runs"].push_back({{"name", layout_name(runs[i].prediction.layout)},
                           {"set", set_flags(runs[i].prediction.layout)},
                           {"recommended", i == 0},
                           {"predicted_s", runs[i].prediction.step_s},
                           {"measured_s", runs[i].measured_s},
                           {"measured_rank", rank_of(order, i)}});
  }
  if (!runs.empty()) {
    doc["fastest"] = layout_name(runs[order.front()].prediction.layout);
    doc["recommended_measured_rank"] = rank_of(order, 0);
    doc["recommended_slower_than_fastest"] =
        runs[0].measured_s / runs[order.front()].measured_s - 1;
  }
  return doc;
}

}  // namespace ms::plan
