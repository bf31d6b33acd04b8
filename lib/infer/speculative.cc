// The accept/reject rule of speculative decoding (infer/speculative.h).
#include "infer/speculative.h"

#include <algorithm>
#include <vector>

#include "core/philox.h"

namespace ms::infer {

DraftVerdict verify_draft_token(std::span<const double> p, std::span<const double> q, int32_t x,
                                double u_accept, double u_resample) {
  const size_t i = static_cast<size_t>(x);
  // u < p/q without dividing: q(x) > 0 for a token drawn from q.
  if (u_accept * q[i] < p[i]) return {true, x};
  std::vector<double> residual(p.size());
  double mass = 0;
  for (size_t t = 0; t < p.size(); ++t) {
    residual[t] = std::max(0.0, p[t] - q[t]);
    mass += residual[t];
  }
  if (mass <= 0) return {false, sample_distribution(p, u_resample)};
  return {false, sample_distribution(residual, u_resample)};
}

double spec_uniform(const SamplingParams& params, int64_t index, SpecDraw draw) {
  static constexpr uint64_t kStreams[] = {
      stream_id("ms.infer.spec.draft"), stream_id("ms.infer.spec.accept"),
      stream_id("ms.infer.spec.resample"), stream_id("ms.infer.spec.bonus")};
  return uniform(params.seed, kStreams[static_cast<size_t>(draw)], static_cast<uint64_t>(index));
}

}  // namespace ms::infer
