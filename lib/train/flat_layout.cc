// Bucket assignment, and each rank's ZeRO segments by the one ownership rule
// (ckpt/zero_ownership.h) applied per bucket; see flat_layout.h.
#include "train/flat_layout.h"

#include <algorithm>
#include <string>

#include "ckpt/zero_ownership.h"

namespace ms::train {

Result<FlatLayout> FlatLayout::build(std::span<const int64_t> param_numels, int dp,
                                     int64_t bucket_bytes) {
  if (dp < 1) return InvalidArgument("data-parallel size must be at least 1, got " +
                                     std::to_string(dp));
  if (bucket_bytes < 1) {
    return InvalidArgument("gradient bucket size must be positive (train.bucket_mb), got " +
                           std::to_string(bucket_bytes) + " bytes");
  }
  FlatLayout layout;
  layout.dp_ = dp;
  const size_t n = param_numels.size();
  layout.param_numels_.assign(param_numels.begin(), param_numels.end());
  layout.param_offsets_.assign(n, 0);
  layout.param_buckets_.assign(n, 0);
  const int64_t bucket_numel = std::max<int64_t>(1, bucket_bytes / int64_t{sizeof(float)});
  GradBucket bucket;
  int64_t offset = 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t p = n - 1 - k;
    if (param_numels[p] < 0) {
      return InvalidArgument("parameter " + std::to_string(p) + " has a negative element count");
    }
    layout.param_offsets_[p] = offset + bucket.numel;
    layout.param_buckets_[p] = layout.buckets_.size();
    bucket.params.push_back(p);
    bucket.numel += param_numels[p];
    if (bucket.numel >= bucket_numel) layout.close_bucket(bucket, offset);
  }
  if (!bucket.params.empty()) layout.close_bucket(bucket, offset);
  layout.total_numel_ = offset;
  return layout;
}

// Pads `bucket` to a multiple of dp, appends it at `offset` and starts an empty one.
void FlatLayout::close_bucket(GradBucket& bucket, int64_t& offset) {
  bucket.numel = (bucket.numel + dp_ - 1) / dp_ * dp_;
  bucket.offset = offset;
  bucket.shard_offset = offset / dp_;
  offset += bucket.numel;
  buckets_.push_back(std::move(bucket));
  bucket = GradBucket{};
}

std::vector<ShardSegment> FlatLayout::shard_segments(int rank) const {
  std::vector<ShardSegment> segments;
  std::vector<int64_t> member_numels;
  for (const GradBucket& bucket : buckets_) {
    member_numels.clear();
    for (const size_t p : bucket.params) member_numels.push_back(param_numels_[p]);
    for (const ckpt::ZeroPiece& piece :
         ckpt::zero_owned_pieces(member_numels, bucket.numel, dp_, rank)) {
      segments.push_back({bucket.params[piece.member], piece.member_begin, piece.member_end,
                          bucket.offset + piece.unit_offset,
                          bucket.shard_offset + piece.owned_offset});
    }
  }
  return segments;
}

Result<comm::ShardSpec> zero_shard_spec(const comm::ShardSpec& param_shard,
                                        const ShardSegment& segment) {
  return param_shard.with_flat_range(segment.param_begin, segment.param_end);
}

}  // namespace ms::train
