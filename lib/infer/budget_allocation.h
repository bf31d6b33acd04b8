// Choosing a format per linear weight under a memory budget (`ms-infer quantize
// --memory-budget`): what the budget must hold besides the linear weights, the refusal of a
// budget below the smallest assignment (before any sensitivity is measured), the assignment an
// Allocation stands for, and the comparison of the chosen assignment with each uniform format by
// the KL measured with all of it applied at once. The knapsack itself is bit_allocation.h; the
// per-weight sensitivities are quant_sensitivity.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "infer/bit_allocation.h"
#include "infer/quant_sensitivity.h"
#include "infer/quantized_model.h"
#include "model/transformer.h"

namespace ms::infer {

// Bytes of the weights no assignment changes (embedding, norms, routers; f32).
int64_t fixed_weight_bytes(const model::Transformer& model);

// One item per linear weight with its candidate formats and their bytes, errors left at 0:
// enough to know the smallest assignment before measuring anything.
std::vector<AllocationItem> linear_weight_sizes(const model::Transformer& model);

// InvalidArgument when `budget` bytes cannot hold every linear weight in its smallest format
// plus the fixed weights in f32; the message starts with `what` (the budget as the user gave
// it, e.g. "--memory-budget 2MB") and names the smallest total.
Status check_budget_fits(const model::Transformer& model, int64_t budget, const std::string& what);

// The format of each item's chosen candidate, by tensor name.
FormatAssignment assignment_of(const std::vector<AllocationItem>& items, const Allocation& a);

// One assignment beside the others: its allocation (or why there is none, e.g. a uniform int4
// whose group size does not divide a weight) and, when there is one, the KL measured with the
// whole assignment applied.
struct AssignmentComparison {
  std::string name;  // "budget 2MB", "uniform int8", ...
  Result<Allocation> allocation;
  double measured_kl = 0;
};

// The uniform formats the chosen assignment is compared with: bf16, int8, int4 with groups of
// 128, 64 and 32.
std::vector<WeightOptions> uniform_formats();

// `chosen` (named `chosen_name`) followed by every uniform format, each with its measured KL.
Result<std::vector<AssignmentComparison>> compare_assignments(
    model::Transformer& model, const KlReference& reference,
    const std::vector<AllocationItem>& items, const Allocation& chosen,
    const std::string& chosen_name);

}  // namespace ms::infer
