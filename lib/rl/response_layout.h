// The responses of a rollout batch held back to back: one flat array per per-token quantity
// (log-probs, advantages, values) and the offsets where each response starts. Responses have
// their own lengths, so nothing is padded and no mask is needed: token t of response i is
// element offsets[i] + t of every per-token array.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace ms::rl {

class ResponseLayout {
 public:
  ResponseLayout() : offsets_{0} {}
  // InvalidArgument naming the response when a length is negative.
  static Result<ResponseLayout> from_lengths(std::span<const int64_t> lengths);

  int64_t num_responses() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  int64_t num_tokens() const { return offsets_.back(); }
  int64_t begin(int64_t response) const { return offsets_[static_cast<size_t>(response)]; }
  int64_t end(int64_t response) const { return offsets_[static_cast<size_t>(response) + 1]; }
  int64_t length(int64_t response) const { return end(response) - begin(response); }

  // InvalidArgument naming `what` unless `values` holds one entry per token.
  Status check_tokens(std::span<const double> values, const char* what) const;
  // InvalidArgument naming `what` unless `values` holds one entry per response.
  Status check_responses(std::span<const double> values, const char* what) const;

 private:
  std::vector<int64_t> offsets_;
};

}  // namespace ms::rl
