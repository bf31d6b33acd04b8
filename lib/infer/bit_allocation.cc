// The multiple-choice knapsack of infer/bit_allocation.h. Sizes are counted above each item's
// smallest choice, so the all-smallest assignment costs zero cells and is always feasible, even
// after coarse rounding.
#include "infer/bit_allocation.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "ops/quant.h"

namespace ms::infer {
namespace {

int64_t smallest(const AllocationItem& item) {
  int64_t best = std::numeric_limits<int64_t>::max();
  for (const AllocationChoice& c : item.choices) best = std::min(best, c.bytes);
  return best;
}

Status check_items(const std::vector<AllocationItem>& items) {
  for (const AllocationItem& item : items) {
    if (item.choices.empty()) return InvalidArgument("tensor " + item.name + " has no formats");
    for (const AllocationChoice& c : item.choices) {
      if (c.bytes < 0 || !(c.error >= 0)) {
        return InvalidArgument("tensor " + item.name + " has a format with " +
                               std::to_string(c.bytes) + " bytes and error " +
                               std::to_string(c.error) + "; both must be 0 or more");
      }
    }
  }
  return Status::OK();
}

// The unit: the gcd of every size above its item's smallest, or, when the budget would need
// more than max_cells of those, the smallest unit that fits max_cells.
int64_t choose_unit(const std::vector<AllocationItem>& items, int64_t spare, int64_t max_cells,
                    bool& exact) {
  int64_t unit = 0;
  for (const AllocationItem& item : items) {
    const int64_t base = smallest(item);
    for (const AllocationChoice& c : item.choices) unit = std::gcd(unit, c.bytes - base);
  }
  if (unit == 0) unit = 1;
  exact = spare / unit <= max_cells;
  if (!exact) unit = (spare + max_cells - 1) / max_cells;
  return unit;
}

}  // namespace

int64_t minimum_bytes(const std::vector<AllocationItem>& items) {
  int64_t total = 0;
  for (const AllocationItem& item : items) total += item.choices.empty() ? 0 : smallest(item);
  return total;
}

Result<Allocation> allocate_bits(const std::vector<AllocationItem>& items, int64_t budget,
                                 int64_t max_cells) {
  MS_RETURN_IF_ERROR(check_items(items));
  const int64_t minimum = minimum_bytes(items);
  if (budget < minimum) {
    return InvalidArgument("the memory budget " + format_bytes(budget) + " (" +
                           std::to_string(budget) + " bytes) is below the smallest assignment, " +
                           format_bytes(minimum) + " (" + std::to_string(minimum) + " bytes)");
  }
  Allocation a;
  const int64_t spare = budget - minimum;
  a.unit = choose_unit(items, spare, std::max<int64_t>(max_cells, 1), a.exact);
  const size_t cells = static_cast<size_t>(spare / a.unit) + 1;
  // best[c]: least error of the items so far with at most c units above their smallest;
  // pick[k][c]: item k's choice there. Choices are tried smallest first, and only a strictly
  // smaller error replaces one, so ties keep the fewer bytes.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> best(cells, 0), next(cells);
  std::vector<std::vector<uint8_t>> pick(items.size(), std::vector<uint8_t>(cells, 0));
  for (size_t k = 0; k < items.size(); ++k) {
    const AllocationItem& item = items[k];
    const int64_t base = smallest(item);
    std::vector<size_t> order(item.choices.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      return item.choices[x].bytes < item.choices[y].bytes;
    });
    std::fill(next.begin(), next.end(), kInf);
    for (size_t j : order) {
      const AllocationChoice& c = item.choices[j];
      const size_t w = static_cast<size_t>((c.bytes - base + a.unit - 1) / a.unit);
      for (size_t cell = w; cell < cells; ++cell) {
        const double e = best[cell - w] + c.error;
        if (e < next[cell]) {
          next[cell] = e;
          pick[k][cell] = static_cast<uint8_t>(j);
        }
      }
    }
    best.swap(next);
  }
  a.choice.assign(items.size(), 0);
  size_t cell = cells - 1;
  for (size_t k = items.size(); k-- > 0;) {
    const size_t j = pick[k][cell];
    const AllocationChoice& c = items[k].choices[j];
    a.choice[k] = j;
    a.bytes += c.bytes;
    a.error += c.error;
    cell -= static_cast<size_t>((c.bytes - smallest(items[k]) + a.unit - 1) / a.unit);
  }
  return a;
}

Result<Allocation> uniform_allocation(const std::vector<AllocationItem>& items,
                                      const WeightOptions& format) {
  Allocation a;
  for (const AllocationItem& item : items) {
    const auto it = std::find_if(item.choices.begin(), item.choices.end(), [&](const auto& c) {
      return format_label(c.format) == format_label(format);
    });
    if (it == item.choices.end()) {
      return NotFound("tensor " + item.name + " cannot be stored in " + format_label(format));
    }
    a.choice.push_back(static_cast<size_t>(it - item.choices.begin()));
    a.bytes += it->bytes;
    a.error += it->error;
  }
  return a;
}

Result<int64_t> parse_byte_size(std::string_view text) {
  const std::string s(text);
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string suffix = s.substr(used);
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  const std::pair<const char*, double> units[] = {
      {"", 1},     {"b", 1},          {"kb", 1e3},        {"mb", 1e6},
      {"gb", 1e9}, {"kib", 1024.0},   {"mib", 1048576.0}, {"gib", 1073741824.0}};
  for (const auto& [name, scale] : units) {
    if (used == 0 || suffix != name) continue;
    const double bytes = value * scale;
    if (!(bytes >= 1) || bytes > 9e18) break;
    return static_cast<int64_t>(bytes);
  }
  return InvalidArgument("memory size \"" + s +
                         "\" is not a positive number of bytes with an optional unit (B, KB, MB, "
                         "GB, KiB, MiB, GiB)");
}

std::string format_bytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

std::vector<AllocationChoice> candidate_formats(int64_t rows, int64_t cols) {
  std::vector<WeightOptions> formats = {{ops::WeightFormat::kF32, 0},
                                        {ops::WeightFormat::kBF16, 0},
                                        {ops::WeightFormat::kInt8, 0}};
  for (int64_t g : {int64_t{128}, int64_t{64}, int64_t{32}}) {
    if (cols % g == 0) formats.push_back({ops::WeightFormat::kInt4, g});
  }
  std::vector<AllocationChoice> out;
  for (const WeightOptions& f : formats) {
    const int64_t scales = ops::scale_count(f.format, rows, cols, f.group_size);
    out.push_back({f, ops::value_bytes(f.format, rows, cols) + 4 * scales, 0});
  }
  return out;
}

std::string format_label(const WeightOptions& format) {
  std::string label(ops::weight_format_name(format.format));
  if (format.format == ops::WeightFormat::kInt4) label += "-g" + std::to_string(format.group_size);
  return label;
}

}  // namespace ms::infer
