// How a per-token loss becomes one number: the three aggregation modes of verl (the `rl.loss_agg`
// key). Every mode is linear in the token losses, so each is a weight per token: the loss is
// sum_t w_t * l_t and its gradient is w_t times the token loss's own gradient. Holding the
// weights (rather than the reduced number) lets every loss share one mechanism and keeps
// token-mean exact across data-parallel ranks.
//
//   token-mean               sum over all tokens / tokens of the global batch (DAPO's
//                            token-level loss: long responses weigh by their length)
//   seq-mean-token-mean      mean over responses of each response's token mean (GRPO's paper)
//   seq-mean-token-sum-norm  sum over all tokens / a constant length (Dr. GRPO: no length bias)
//
// Across data-parallel ranks each rank holds part of the batch; the scope names the global
// token and response counts, and the weights are multiplied by the data-parallel size because
// the trainer averages (sum / dp) the ranks' gradients: after that average the gradient is the
// one of the loss over the union batch, which is what dp=2 against one rank checks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "rl/response_layout.h"

namespace ms::rl {

enum class LossAggregation { kTokenMean, kSeqMeanTokenMean, kSeqMeanTokenSumNorm };

// "token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"; InvalidArgument listing them.
Result<LossAggregation> parse_loss_aggregation(std::string_view name);
std::string_view loss_aggregation_name(LossAggregation mode);

struct AggregationScope {
  LossAggregation mode = LossAggregation::kTokenMean;
  // Tokens in the global (all data-parallel ranks) mini-batch; 0: this batch's own count.
  int64_t global_tokens = 0;
  // Non-empty responses in the global mini-batch; 0: this batch's own count.
  int64_t global_responses = 0;
  // The constant divisor of seq-mean-token-sum-norm (the maximum response length); required
  // for that mode.
  double norm_length = 0.0;
  int data_parallel_size = 1;
};

// One weight per token of `layout`. Empty responses take no weight and do not count as
// responses (as verl's masks exclude fully masked rows). InvalidArgument when the mode needs a
// norm_length that is missing, or the data-parallel size is below 1.
Result<std::vector<double>> aggregation_weights(const ResponseLayout& layout,
                                                const AggregationScope& scope);

}  // namespace ms::rl
