// Robust statistics shared by the diagnosis tools (check's verdict, detect, stragglers):
// median, median absolute deviation (MAD) and the robust z-score of Iglewicz and Hoaglin,
// z = 0.6745 * (x - median) / MAD. A median and MAD are not dragged by the one bad machine
// they are meant to find, unlike a mean and standard deviation.
#pragma once

#include <span>
#include <vector>

namespace ms::diag {

// Median of `values` (mean of the two middle values for an even count); 0 for an empty span.
double median(std::span<const double> values);

// Median absolute deviation from the median; 0 for an empty span.
double median_absolute_deviation(std::span<const double> values);

// Scale that makes 0.6745 * (x - median) / MAD comparable to a standard-normal z-score.
inline constexpr double kRobustZScale = 0.6745;

// The robust z-score of x against a population with the given median and MAD. When MAD is 0
// (at least half of the population is identical) the score is 0 for x == median and
// +/- infinity otherwise, so any departure from a tight majority counts as an outlier; callers
// that must not alarm on tiny departures combine the score with a practical-size test.
double robust_z(double x, double median, double mad);

// Robust z-scores of every value against the population itself.
std::vector<double> robust_z_scores(std::span<const double> values);

}  // namespace ms::diag
