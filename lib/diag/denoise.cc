// Window denoisers of detect; see denoise.h.
#include "diag/denoise.h"

#include <algorithm>
#include <numeric>

namespace ms::diag {

void IdentityDenoiser::denoise(std::span<const double> in, std::span<double> out) const {
  std::copy(in.begin(), in.end(), out.begin());
}

void MovingAverageDenoiser::denoise(std::span<const double> in, std::span<double> out) const {
  const int n = static_cast<int>(in.size());
  std::vector<double> medians(in.size()), neighbourhood;
  for (int i = 0; i < n; ++i) {
    const int lo = std::max(0, i - median_radius_), hi = std::min(n - 1, i + median_radius_);
    neighbourhood.assign(in.begin() + lo, in.begin() + hi + 1);
    const auto mid = neighbourhood.begin() + static_cast<long>(neighbourhood.size() / 2);
    std::nth_element(neighbourhood.begin(), mid, neighbourhood.end());
    medians[i] = *mid;
  }
  std::vector<double> prefix(in.size() + 1, 0.0);
  std::partial_sum(medians.begin(), medians.end(), prefix.begin() + 1);
  for (int i = 0; i < n; ++i) {
    const int lo = std::max(0, i - mean_radius_), hi = std::min(n - 1, i + mean_radius_);
    out[i] = (prefix[hi + 1] - prefix[lo]) / (hi - lo + 1);
  }
}

std::vector<double> centered(std::span<const double> window) {
  const double mean = window.empty()
                          ? 0.0
                          : std::accumulate(window.begin(), window.end(), 0.0) /
                                static_cast<double>(window.size());
  std::vector<double> out(window.begin(), window.end());
  for (double& v : out) v -= mean;
  return out;
}

void LstmVaeDenoiser::denoise(std::span<const double> in, std::span<double> out) const {
  const std::vector<double> shape = centered(in);
  const double mean = in.empty() ? 0.0 : in[0] - shape[0];
  const std::vector<double> rebuilt = model_.reconstruct(shape);
  for (size_t i = 0; i < in.size(); ++i) out[i] = rebuilt[i] + mean;
}

}  // namespace ms::diag
