// The layout search of `ms-train plan`: every layout the trainer accepts for the model on the
// cluster's ranks with the config's global batch (tp over the divisors that split the heads and
// d_ff, pp up to the layers with the even split where the stages divide them and the near-even
// uneven ones otherwise (layout.h's planned_pp_splits), cp over those that cut the sequence into
// 2 cp chunks, vpp with the interleaved schedule, the three schedules, ep over the divisors of
// dp x cp that split the experts, every micro-batch size that divides the per-rank batch, ZeRO-1
// on and off, the three recomputation modes, sequence parallelism on and off), each predicted
// (predict.h), those over the memory limit set aside, the rest ranked by step time.
#pragma once

#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"
#include "plan/cluster.h"
#include "plan/predict.h"
#include "plan/recommend.h"

namespace ms::plan {

struct SearchResult {
  int world = 0;
  int64_t considered = 0;          // layouts the trainer accepts
  int64_t over_memory = 0;         // of those, over the memory limit
  std::vector<Prediction> ranked;  // the rest, fastest first
  // Among the ties with the fastest (recommend.h); `ranked` keeps it however small `keep` is.
  Recommendation recommendation;
  const Prediction& recommended() const { return ranked[recommendation.index]; }
};

// Every accepted layout of `config` on `world` ranks.
std::vector<Layout> candidate_layouts(const config::RunConfig& config, int world);

// Searches; `keep` limits `ranked` (0: all) but never drops the recommendation. InvalidArgument
// when no layout fits the memory
// (naming the smallest peak found) or the trainer accepts none.
Result<SearchResult> search_layouts(const Cluster& cluster, const config::RunConfig& config,
                                    int world, Scaling scaling = {}, size_t keep = 0);

// One layout predicted on `cluster` (its memory is not checked against the limit).
Result<Prediction> predict_layout(const Cluster& cluster, const config::RunConfig& config,
                                  const Layout& layout, int world, Scaling scaling = {});

// Parses "net=0.5,compute=2" (either or both). InvalidArgument naming the bad part.
Result<Scaling> parse_what_if(const std::string& text);

}  // namespace ms::plan
