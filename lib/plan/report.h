// The printed and JSON forms of a plan (ms-train plan): a table of the top layouts with
// predicted step time, MFU, bubble, peak memory per rank split into weights, gradients,
// optimizer state and activations, and bus bytes per step on each axis, each step time with its
// error band; the ties with the fastest, the recommendation among them and why, and the --set
// flags that run it; and, with --what-if, the scaled best against the unscaled one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "plan/search.h"

namespace ms::plan {

struct PlanContext {
  std::string config_path;
  const Cluster* cluster = nullptr;
  const config::RunConfig* config = nullptr;
  int world = 0;
};

struct WhatIf {
  Scaling scaling;
  Prediction baseline_best;  // the unscaled best
  Prediction same_layout;    // that layout under the scaling
  Prediction best;           // the best layout under the scaling
};

std::string prediction_row_header();
std::string prediction_row(size_t index, const Prediction& p);
std::string run_command(const PlanContext& ctx, const Layout& layout);
// "# note: FILE was profiled while other processes took N% of the node's CPU; ..." for a
// cluster whose profile ran under load (Cluster::disturbed).
std::string disturbed_note(const Cluster& cluster);

std::string plan_text(const PlanContext& ctx, const SearchResult& result, const WhatIf* what_if);
nlohmann::ordered_json prediction_json(const Prediction& p);
nlohmann::ordered_json plan_json(const PlanContext& ctx, const SearchResult& result,
                                 const WhatIf* what_if);

}  // namespace ms::plan
