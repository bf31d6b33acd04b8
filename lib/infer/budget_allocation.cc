#include "infer/budget_allocation.h"

#include <algorithm>

namespace ms::infer {

int64_t fixed_weight_bytes(const model::Transformer& model) {
  const std::vector<size_t> linear = model.cached_linear_parameters();
  int64_t bytes = 0;
  for (size_t i = 0; i < model.parameters().size(); ++i) {
    if (std::find(linear.begin(), linear.end(), i) == linear.end()) {
      bytes += static_cast<int64_t>(model.parameters()[i].value.nbytes());
    }
  }
  return bytes;
}

std::vector<AllocationItem> linear_weight_sizes(const model::Transformer& model) {
  std::vector<AllocationItem> sizes;
  for (size_t i : model.cached_linear_parameters()) {
    const model::Parameter& p = model.parameters()[i];
    sizes.push_back({p.name, candidate_formats(p.global_shape[0], p.global_shape[1])});
  }
  return sizes;
}

Status check_budget_fits(const model::Transformer& model, int64_t budget,
                         const std::string& what) {
  const int64_t fixed = fixed_weight_bytes(model);
  const int64_t minimum = fixed + minimum_bytes(linear_weight_sizes(model));
  if (budget >= minimum) return Status::OK();
  return InvalidArgument(what + " (" + std::to_string(budget) +
                         " bytes) is below the smallest assignment, " + format_bytes(minimum) +
                         " (" + std::to_string(minimum) +
                         " bytes: every linear weight in its smallest format and " +
                         std::to_string(fixed) + " bytes of other weights in f32)");
}

FormatAssignment assignment_of(const std::vector<AllocationItem>& items, const Allocation& a) {
  FormatAssignment formats;
  for (size_t k = 0; k < items.size(); ++k) {
    formats[items[k].name] = items[k].choices[a.choice[k]].format;
  }
  return formats;
}

std::vector<WeightOptions> uniform_formats() {
  return {{ops::WeightFormat::kBF16, 0},
          {ops::WeightFormat::kInt8, 0},
          {ops::WeightFormat::kInt4, 128},
          {ops::WeightFormat::kInt4, 64},
          {ops::WeightFormat::kInt4, 32}};
}

Result<std::vector<AssignmentComparison>> compare_assignments(
    model::Transformer& model, const KlReference& reference,
    const std::vector<AllocationItem>& items, const Allocation& chosen,
    const std::string& chosen_name) {
  std::vector<AssignmentComparison> rows;
  rows.push_back({chosen_name, chosen, 0});
  for (const WeightOptions& f : uniform_formats()) {
    rows.push_back({"uniform " + format_label(f), uniform_allocation(items, f), 0});
  }
  for (AssignmentComparison& row : rows) {
    if (!row.allocation.ok()) continue;
    MS_ASSIGN_OR_RETURN(row.measured_kl, reference.kl(model, assignment_of(items, *row.allocation)));
  }
  return rows;
}

}  // namespace ms::infer
