// Pipeline stage cuts (pp_stages.h).
#include "parallel/pp_stages.h"

#include <string>

namespace ms::parallel {
namespace {

std::string list_string(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The pp values up to n_layers whose even cut (with vpp chunks) works.
std::string working_pp(int64_t n_layers, int vpp) {
  std::string s;
  for (int64_t p = 1; p * vpp <= n_layers; ++p) {
    if (n_layers % (p * vpp) == 0) s += (s.empty() ? "" : ", ") + std::to_string(p);
  }
  return s;
}

// n_layers over `stages` as evenly as possible, the larger stages first.
std::vector<int64_t> near_even(int64_t n_layers, int64_t stages) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < stages; ++i) out.push_back(n_layers / stages + (i < n_layers % stages ? 1 : 0));
  return out;
}

}  // namespace

Result<std::vector<StageLayers>> pp_stage_layers(int64_t n_layers, int pp, int vpp,
                                                 const std::vector<int64_t>& explicit_counts) {
  if (n_layers < 1 || pp < 1 || vpp < 1) {
    return InvalidArgument("a pipeline cut needs model.n_layers, parallel.pp and parallel.vpp "
                           ">= 1, got " + std::to_string(n_layers) + ", " + std::to_string(pp) +
                           ", " + std::to_string(vpp));
  }
  const int64_t stages = int64_t{pp} * vpp;
  std::vector<int64_t> counts = explicit_counts;
  if (counts.empty()) {
    if (n_layers % stages != 0) {
      std::string msg = "model.n_layers (" + std::to_string(n_layers) + ") does not split evenly "
                        "into parallel.pp x parallel.vpp = " + std::to_string(stages) +
                        " stages; ";
      if (stages <= n_layers) {
        msg += "set parallel.pp_layers, e.g. " + list_string(near_even(n_layers, stages)) + ", or ";
      }
      msg += "use a parallel.pp that divides it (with vpp " + std::to_string(vpp) + ": " +
             working_pp(n_layers, vpp) + ")";
      return InvalidArgument(msg);
    }
    counts.assign(static_cast<size_t>(stages), n_layers / stages);
  }
  if (static_cast<int64_t>(counts.size()) != stages) {
    return InvalidArgument("parallel.pp_layers " + list_string(counts) + " has " +
                           std::to_string(counts.size()) + " entries; it needs one per stage, "
                           "parallel.pp x parallel.vpp = " + std::to_string(stages));
  }
  int64_t sum = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 1) {
      return InvalidArgument("parallel.pp_layers " + list_string(counts) + ": stage " +
                             std::to_string(i) + " has " + std::to_string(counts[i]) +
                             " layers; every stage needs at least 1");
    }
    sum += counts[i];
  }
  if (sum != n_layers) {
    return InvalidArgument("parallel.pp_layers " + list_string(counts) + " holds " +
                           std::to_string(sum) + " layers but model.n_layers is " +
                           std::to_string(n_layers) + " (" +
                           std::to_string(sum > n_layers ? sum - n_layers : n_layers - sum) +
                           (sum > n_layers ? " too many" : " missing") +
                           "); every layer must be on exactly one stage");
  }
  std::vector<StageLayers> out;
  int64_t first = 0;
  for (int64_t c : counts) {
    out.push_back({first, c});
    first += c;
  }
  return out;
}

}  // namespace ms::parallel
