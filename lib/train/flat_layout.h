// FlatLayout: where every parameter lives in the trainer's flat fp32 buffers, how those buffers
// are cut into gradient buckets for the data-parallel reduction, and which elements each rank
// owns under ZeRO-1.
//
// Parameters are laid out in reverse order (the order backward finishes their gradients), and
// consecutive parameters are grouped into buckets of about `bucket_bytes`; a parameter never
// straddles two buckets. Each bucket is padded with zeros to a multiple of dp elements so that
// a reduce-scatter splits it evenly: under ZeRO-1 rank r owns elements
// [offset + r * S, offset + (r + 1) * S) of every bucket, S = bucket numel / dp (the ZeRO
// ownership rule of ckpt/zero_ownership.h, which `ms-ckpt reshard` applies per tensor). A rank's shard
// buffer is those ranges back to back, bucket by bucket. Because a parameter sits in one bucket,
// a rank holds at most one contiguous range of each parameter: a ShardSpec flat range
// (ShardSegment below), which is what checkpoints record.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/shard_spec.h"
#include "core/status.h"

namespace ms::train {

struct GradBucket {
  int64_t offset = 0;          // first element in the flat buffers
  int64_t numel = 0;           // elements including padding, a multiple of dp
  int64_t shard_offset = 0;    // where each rank's part of this bucket starts in its shard
  std::vector<size_t> params;  // parameter indices, in the order of the flat buffer
};

// Elements [param_begin, param_end) of parameter `param` (row-major within the parameter), held
// at `flat_offset` of the flat buffers and at `shard_offset` of one rank's shard buffer.
struct ShardSegment {
  size_t param = 0;
  int64_t param_begin = 0;
  int64_t param_end = 0;
  int64_t flat_offset = 0;
  int64_t shard_offset = 0;
  int64_t length() const { return param_end - param_begin; }
  bool operator==(const ShardSegment&) const = default;
};

class FlatLayout {
 public:
  // Layout for parameters of `param_numels` elements over `dp` ranks. A bucket is closed as soon
  // as it holds at least `bucket_bytes` of fp32 elements. InvalidArgument for dp < 1,
  // bucket_bytes < 1 or a negative element count.
  static Result<FlatLayout> build(std::span<const int64_t> param_numels, int dp,
                                  int64_t bucket_bytes);

  int dp() const { return dp_; }
  size_t num_params() const { return param_offsets_.size(); }
  // Length of the flat buffers, padding included.
  int64_t total_numel() const { return total_numel_; }
  // Length of every rank's ZeRO shard buffer (total_numel / dp).
  int64_t shard_numel() const { return total_numel_ / dp_; }
  int64_t param_offset(size_t param) const { return param_offsets_[param]; }
  int64_t param_numel(size_t param) const { return param_numels_[param]; }
  size_t bucket_of(size_t param) const { return param_buckets_[param]; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }

  // The parameter ranges `rank` owns under ZeRO-1, in shard-buffer order.
  std::vector<ShardSegment> shard_segments(int rank) const;

 private:
  FlatLayout() = default;
  void close_bucket(GradBucket& bucket, int64_t& offset);

  int dp_ = 1;
  int64_t total_numel_ = 0;
  std::vector<int64_t> param_numels_;
  std::vector<int64_t> param_offsets_;
  std::vector<size_t> param_buckets_;
  std::vector<GradBucket> buckets_;
};

// The slice of a parameter a ZeRO segment amounts to, in the parameter's global coordinates:
// `param_shard` (the part of the parameter this rank's model replica holds; the whole tensor
// without tensor or pipeline parallelism) narrowed to the segment's flat range.
Result<comm::ShardSpec> zero_shard_spec(const comm::ShardSpec& param_shard,
                                        const ShardSegment& segment);

}  // namespace ms::train
