#include "rl/aggregation.h"

namespace ms::rl {

Result<LossAggregation> parse_loss_aggregation(std::string_view name) {
  if (name == "token-mean") return LossAggregation::kTokenMean;
  if (name == "seq-mean-token-mean") return LossAggregation::kSeqMeanTokenMean;
  if (name == "seq-mean-token-sum-norm") return LossAggregation::kSeqMeanTokenSumNorm;
  return InvalidArgument("unknown loss aggregation '" + std::string(name) +
                         "' (token-mean, seq-mean-token-mean or seq-mean-token-sum-norm)");
}

std::string_view loss_aggregation_name(LossAggregation mode) {
  switch (mode) {
    case LossAggregation::kTokenMean: return "token-mean";
    case LossAggregation::kSeqMeanTokenMean: return "seq-mean-token-mean";
    case LossAggregation::kSeqMeanTokenSumNorm: return "seq-mean-token-sum-norm";
  }
  return "?";
}

Result<std::vector<double>> aggregation_weights(const ResponseLayout& layout,
                                                const AggregationScope& scope) {
  if (scope.data_parallel_size < 1) {
    return InvalidArgument("data-parallel size must be at least 1, got " +
                           std::to_string(scope.data_parallel_size));
  }
  const double dp = scope.data_parallel_size;
  std::vector<double> weights(static_cast<size_t>(layout.num_tokens()), 0.0);
  int64_t local_responses = 0;
  for (int64_t i = 0; i < layout.num_responses(); ++i) local_responses += layout.length(i) > 0;
  switch (scope.mode) {
    case LossAggregation::kTokenMean: {
      const int64_t tokens = scope.global_tokens > 0 ? scope.global_tokens : layout.num_tokens();
      if (tokens == 0) return weights;
      for (double& w : weights) w = dp / static_cast<double>(tokens);
      return weights;
    }
    case LossAggregation::kSeqMeanTokenMean: {
      const int64_t responses = scope.global_responses > 0 ? scope.global_responses : local_responses;
      for (int64_t i = 0; i < layout.num_responses(); ++i) {
        const int64_t n = layout.length(i);
        for (int64_t t = layout.begin(i); t < layout.end(i); ++t) {
          weights[static_cast<size_t>(t)] =
              dp / (static_cast<double>(n) * static_cast<double>(responses));
        }
      }
      return weights;
    }
    case LossAggregation::kSeqMeanTokenSumNorm: {
      if (!(scope.norm_length > 0.0)) {
        return InvalidArgument(
            "seq-mean-token-sum-norm needs a positive norm length (the maximum response length)");
      }
      // On one rank this is verl's sum / constant. verl leaves out the data-parallel factor for
      // this mode, so its result shrinks with dp; the factor here undoes the trainer's 1/dp
      // average, so dp ranks equal one rank holding the union batch, as in the other modes.
      for (double& w : weights) w = dp / scope.norm_length;
      return weights;
    }
  }
  return Internal("unhandled loss aggregation");
}

}  // namespace ms::rl
