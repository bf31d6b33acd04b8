// Per-tensor bit allocation under a memory budget, after LLM-PQ (Zhao et al., 2024): each
// quantizable weight has a few candidate formats, each with its bytes and the error it adds
// when that weight alone is quantized so (measured on calibration text, quant_sensitivity.h).
// Taking the errors as additive, the best assignment is a multiple-choice knapsack: pick one
// candidate per weight, total bytes within the budget, least total error. allocate_bits solves
// it exactly by dynamic programming over the bytes above each weight's smallest candidate, in
// units of their greatest common divisor; when that would take more than max_cells cells it
// rounds every size up to a coarser unit, so the result still fits the budget but may miss the
// optimum by at most that rounding (Allocation::exact says which).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "infer/serving_weights.h"

namespace ms::infer {

struct AllocationChoice {
  WeightOptions format;
  int64_t bytes = 0;   // values and scales held in this format
  double error = 0;    // the error this choice adds (>= 0)
};

struct AllocationItem {
  std::string name;                      // the tensor
  std::vector<AllocationChoice> choices;  // at least one
};

struct Allocation {
  std::vector<size_t> choice;  // per item, an index into its choices
  int64_t bytes = 0;           // total over the items
  double error = 0;            // total over the items
  bool exact = true;           // solved without rounding the sizes
  int64_t unit = 1;            // the byte unit the dynamic programme counted in
};

// The least-error assignment with total bytes <= budget. InvalidArgument for an item with no
// choices or a negative size or error, and for a budget below the smallest possible total,
// naming that total.
Result<Allocation> allocate_bits(const std::vector<AllocationItem>& items, int64_t budget,
                                 int64_t max_cells = int64_t{1} << 18);

// Every item in the choice whose format is `format`: the uniform assignment to compare with.
// NotFound naming the first item without that format (int4 with a group size that does not
// divide its inputs).
Result<Allocation> uniform_allocation(const std::vector<AllocationItem>& items,
                                      const WeightOptions& format);

// The smallest possible total bytes: every item in its smallest choice.
int64_t minimum_bytes(const std::vector<AllocationItem>& items);

// "2GB", "512MB", "1.5GiB", "300000" (bytes): decimal units are powers of 1000, binary ones of
// 1024. InvalidArgument naming the text otherwise, or for a size that is not positive.
Result<int64_t> parse_byte_size(std::string_view text);

// "1.50 MB" (decimal).
std::string format_bytes(int64_t bytes);

// The candidate formats for a (rows, cols) weight: f32, bf16, int8 and int4 with groups of 128,
// 64 and 32 where the group size divides cols, with their bytes (errors left at 0).
std::vector<AllocationChoice> candidate_formats(int64_t rows, int64_t cols);

// "f32", "bf16", "int8", "int4-g64".
std::string format_label(const WeightOptions& format);

}  // namespace ms::infer
