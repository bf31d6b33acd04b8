// Median / MAD / robust z-score; see robust_stats.h for why these rather than mean and stddev.
#include "diag/robust_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ms::diag {

double median(std::span<const double> values) {
  if (values.empty()) return 0;
  std::vector<double> sorted(values.begin(), values.end());
  const size_t mid = sorted.size() / 2;
  std::nth_element(sorted.begin(), sorted.begin() + mid, sorted.end());
  const double upper = sorted[mid];
  if (sorted.size() % 2 == 1) return upper;
  const double lower = *std::max_element(sorted.begin(), sorted.begin() + mid);
  return (lower + upper) / 2;
}

double median_absolute_deviation(std::span<const double> values) {
  if (values.empty()) return 0;
  const double center = median(values);
  std::vector<double> deviations;
  deviations.reserve(values.size());
  for (double v : values) deviations.push_back(std::fabs(v - center));
  return median(deviations);
}

double robust_z(double x, double median, double mad) {
  const double delta = x - median;
  if (mad > 0) return kRobustZScale * delta / mad;
  if (delta == 0) return 0;
  const double inf = std::numeric_limits<double>::infinity();
  return delta > 0 ? inf : -inf;
}

std::vector<double> robust_z_scores(std::span<const double> values) {
  const double center = median(values);
  const double mad = median_absolute_deviation(values);
  std::vector<double> scores;
  scores.reserve(values.size());
  for (double v : values) scores.push_back(robust_z(v, center, mad));
  return scores;
}

}  // namespace ms::diag
