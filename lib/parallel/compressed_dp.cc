// Quantized ZeRO-1 reduce-scatter and all-gather; see compressed_dp.h for the schemes.
#include "parallel/compressed_dp.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace ms::parallel {
namespace {

// The hops of the rounding keys: each quantization of a step draws its own numbers.
enum Hop : uint64_t { kOneLevel = 0, kIntraNode = 1, kInterNode = 2, kWeights = 3 };

}  // namespace

void CompressedTraffic::add(const CompressedTraffic& other) {
  grad_bytes += other.grad_bytes;
  grad_inter_node_bytes += other.grad_inter_node_bytes;
  weight_bytes += other.weight_bytes;
  full_precision_bytes += other.full_precision_bytes;
}

// One bucket's gradient reduce-scatter in flight: one hop, or two whose second is issued when
// test() or wait() sees the first complete.
class CompressedDataParallel::GradExchange : public comm::RequestImpl {
 public:
  GradExchange(CompressedDataParallel& owner, size_t bucket, float* shard, int64_t step)
      : owner_(owner), bucket_(bucket), shard_(shard), step_(step) {}

  Status start(float* grads);
  Status wait() override {
    while (true) {
      MS_RETURN_IF_ERROR(inner_.wait());
      MS_ASSIGN_OR_RETURN(const bool done, advance());
      if (done) return Status::OK();
    }
  }
  Result<bool> test() override {
    MS_ASSIGN_OR_RETURN(const bool finished, inner_.test());
    if (!finished) return false;
    return advance();
  }

 private:
  const CompressedBucket& bucket() const { return owner_.buckets_[bucket_]; }
  const std::vector<WireRun>& runs(int part) const {
    return bucket().part_runs[static_cast<size_t>(part)];
  }
  WireQuant hop1_quant() const {
    const CompressConfig& c = owner_.config_;
    return {c.two_level ? 8 : c.grad_bits, c.group_size, c.stochastic};
  }
  WireQuant hop2_quant() const {
    const CompressConfig& c = owner_.config_;
    return {c.inter_bits, c.inter_group_size, c.stochastic};
  }
  uint64_t key(Hop hop, int part) const {
    return rounding_key({owner_.config_.seed, static_cast<uint64_t>(step_), bucket_,
                         static_cast<uint64_t>(owner_.dp_.rank()), hop,
                         static_cast<uint64_t>(part)});
  }
  // Quantizes `values` (part `part`'s P values, in the Hadamard domain when smoothing) into
  // `out`; with error feedback, stores what was lost (in the same domain) in `residual`.
  void encode(const float* values, int part, const WireQuant& q, Hop hop, uint8_t* out,
              float* residual);
  Status issue_second_hop();
  Result<bool> advance();
  void finish(const WireQuant& q, int senders);

  CompressedDataParallel& owner_;
  size_t bucket_;
  float* shard_;
  int64_t step_;
  int stage_ = 0;  // 1: the first hop is in flight; 2: the second
  std::vector<uint8_t> send_, recv_;
  std::vector<size_t> send_counts_, recv_counts_;  // bytes, as ialltoallv takes them
  comm::Request inner_;
};

void CompressedDataParallel::GradExchange::encode(const float* values, int part, const WireQuant& q,
                                                  Hop hop, uint8_t* out, float* residual) {
  encode_message(values, runs(part), q, key(hop, part), out, residual);
}

Status CompressedDataParallel::GradExchange::start(float* grads) {
  CompressedDataParallel& o = owner_;
  const CompressConfig& c = o.config_;
  const int64_t p = bucket().part_numel;
  const int dp = o.dp_.size(), me = o.dp_.rank();
  std::vector<float>& residual = o.residual_[bucket_];
  if (c.error_feedback) {
    for (size_t i = 0; i < residual.size(); ++i) grads[i] += residual[i];
  }
  if (c.hadamard) {
    for (int part = 0; part < dp; ++part) hadamard_runs(grads + part * p, runs(part));
  }
  float* kept = c.error_feedback ? residual.data() : nullptr;
  const WireQuant q = hop1_quant();
  comm::Communicator& group = c.two_level ? *o.local_ : o.dp_;
  // Destination d of `group` receives these parts: its own (one level), or its column's.
  auto parts_for = [&](int d) {
    return c.two_level ? o.owner_[static_cast<size_t>(d)] : std::vector<int>{d};
  };
  send_counts_.assign(static_cast<size_t>(group.size()), 0);
  recv_counts_.assign(static_cast<size_t>(group.size()), 0);
  for (int d = 0; d < group.size(); ++d) {
    for (int part : parts_for(d)) send_counts_[d] += message_bytes(runs(part), q);
  }
  size_t from_each = 0;
  for (int part : parts_for(group.rank())) from_each += message_bytes(runs(part), q);
  std::fill(recv_counts_.begin(), recv_counts_.end(), from_each);
  size_t total = 0;
  for (size_t n : send_counts_) total += n;
  send_.resize(total);
  recv_.resize(from_each * static_cast<size_t>(group.size()));
  uint8_t* out = send_.data();
  for (int d = 0; d < group.size(); ++d) {
    for (int part : parts_for(d)) {
      encode(grads + part * p, part, q, c.two_level ? kIntraNode : kOneLevel, out,
             kept == nullptr ? nullptr : kept + part * p);
      out += message_bytes(runs(part), q);
    }
  }
  if (c.error_feedback && c.hadamard) {
    for (int part = 0; part < dp; ++part) hadamard_runs(kept + part * p, runs(part));
  }
  for (int d = 0; d < group.size(); ++d) {
    if (d == group.rank()) continue;
    o.traffic_.grad_bytes += static_cast<uint64_t>(send_counts_[d]);
    // Hop 1 of two stays within the node by construction.
    if (!c.two_level && o.node_of_rank_[d] != o.node_of_rank_[me]) {
      o.traffic_.grad_inter_node_bytes += static_cast<uint64_t>(send_counts_[d]);
    }
  }
  o.traffic_.full_precision_bytes += static_cast<uint64_t>((dp - 1) * p) * sizeof(float);
  stage_ = 1;
  MS_ASSIGN_OR_RETURN(inner_, group.ialltoallv(send_.data(), send_counts_, recv_.data(),
                                               recv_counts_, DType::kU8));
  return Status::OK();
}

// Hop 1 of two has arrived: this rank now sums its column's parts over the node and sends each
// sum, requantized, to its owner on the other nodes.
Status CompressedDataParallel::GradExchange::issue_second_hop() {
  CompressedDataParallel& o = owner_;
  const CompressConfig& c = o.config_;
  const int64_t p = bucket().part_numel;
  const int l = o.local_->rank(), nodes = o.nodes_;
  const std::vector<int>& column = o.owner_[static_cast<size_t>(l)];
  const WireQuant q1 = hop1_quant(), q2 = hop2_quant();
  std::vector<float> partial(static_cast<size_t>(nodes * p), 0.0f);
  const uint8_t* in = recv_.data();
  for (int sender = 0; sender < o.local_->size(); ++sender) {
    for (int n = 0; n < nodes; ++n) {
      decode_message(in, runs(column[n]), q1, partial.data() + n * p, Decode::kAdd);
      in += message_bytes(runs(column[n]), q1);
    }
  }
  std::vector<float>& residual = o.inter_residual_[bucket_];
  if (c.error_feedback) {
    for (size_t i = 0; i < partial.size(); ++i) partial[i] += residual[i];
  }
  send_counts_.assign(static_cast<size_t>(nodes), 0);
  recv_counts_.assign(static_cast<size_t>(nodes),
                      message_bytes(runs(column[o.cross_->rank()]), q2));
  size_t total = 0;
  for (int n = 0; n < nodes; ++n) total += send_counts_[n] = message_bytes(runs(column[n]), q2);
  send_.assign(total, 0);
  recv_.assign(recv_counts_[0] * static_cast<size_t>(nodes), 0);
  uint8_t* out = send_.data();
  for (int n = 0; n < nodes; ++n) {
    encode(partial.data() + n * p, column[n], q2, kInterNode, out,
           c.error_feedback ? residual.data() + n * p : nullptr);
    out += send_counts_[n];
    if (n != o.cross_->rank()) {
      o.traffic_.grad_bytes += static_cast<uint64_t>(send_counts_[n]);
      o.traffic_.grad_inter_node_bytes += static_cast<uint64_t>(send_counts_[n]);
    }
  }
  stage_ = 2;
  MS_ASSIGN_OR_RETURN(inner_,
                      o.cross_->ialltoallv(send_.data(), send_counts_, recv_.data(),
                                           recv_counts_, DType::kU8));
  return Status::OK();
}

// The owner's sum: every sender's message for its part, in rank order, out of the Hadamard
// domain.
void CompressedDataParallel::GradExchange::finish(const WireQuant& q, int senders) {
  const int me = owner_.dp_.rank();
  const int64_t p = bucket().part_numel;
  std::fill(shard_, shard_ + p, 0.0f);
  const int64_t each = message_bytes(runs(me), q);
  for (int s = 0; s < senders; ++s) {
    decode_message(recv_.data() + s * each, runs(me), q, shard_, Decode::kAdd);
  }
  if (owner_.config_.hadamard) hadamard_runs(shard_, runs(me));
  send_ = {};
  recv_ = {};
}

Result<bool> CompressedDataParallel::GradExchange::advance() {
  const bool two_level = owner_.config_.two_level;
  // On one node hop 1 already delivered every rank's 8-bit message for this rank's part (its
  // column is itself alone): a second, 4-bit hop would only add error.
  if (stage_ == 1 && two_level && owner_.nodes_ > 1) {
    MS_RETURN_IF_ERROR(issue_second_hop());
    return false;
  }
  if (!two_level) {
    finish(hop1_quant(), owner_.dp_.size());
  } else if (stage_ == 1) {
    finish(hop1_quant(), owner_.local_->size());
  } else {
    finish(hop2_quant(), owner_.nodes_);
  }
  return true;
}

// One bucket's parameter all-gather in flight.
class CompressedDataParallel::WeightExchange : public comm::RequestImpl {
 public:
  WeightExchange(CompressedDataParallel& owner, size_t bucket, float* values)
      : owner_(owner), bucket_(bucket), values_(values) {}

  Status start(const float* shard, int64_t step) {
    CompressedDataParallel& o = owner_;
    const CompressConfig& c = o.config_;
    const CompressedBucket& b = o.buckets_[bucket_];
    const int dp = o.dp_.size(), me = o.dp_.rank();
    const int64_t p = b.part_numel;
    const WireQuant q{c.weight_bits, c.weight_group_size, c.stochastic};
    const std::vector<WireRun>& mine = b.part_runs[static_cast<size_t>(me)];
    // Quantized runs carry the difference from the replicated values (or, naive, the values);
    // raw runs always carry the exact new values.
    std::vector<float> message(shard, shard + p);
    if (c.weight_diff) {
      const float* replica = values_ + me * p;
      for (const WireRun& run : mine) {
        if (!run.compressed) continue;
        for (int64_t i = run.offset; i < run.offset + run.length; ++i) message[i] -= replica[i];
      }
    }
    counts_.resize(static_cast<size_t>(dp));
    size_t total = 0;
    for (int r = 0; r < dp; ++r) {
      counts_[r] = message_bytes(b.part_runs[static_cast<size_t>(r)], q);
      total += counts_[r];
    }
    send_.resize(counts_[me]);
    recv_.resize(total);
    encode_message(message.data(), mine, q,
                   rounding_key({c.seed, static_cast<uint64_t>(step), bucket_,
                                 static_cast<uint64_t>(me), kWeights, 0}),
                   send_.data());
    o.traffic_.weight_bytes += counts_[me] * static_cast<uint64_t>(dp - 1);
    o.traffic_.full_precision_bytes += static_cast<uint64_t>(p * (dp - 1)) * sizeof(float);
    MS_ASSIGN_OR_RETURN(inner_, o.dp_.iallgatherv(send_.data(), send_.size(), recv_.data(),
                                                  counts_, DType::kU8));
    return Status::OK();
  }
  Status wait() override {
    MS_RETURN_IF_ERROR(inner_.wait());
    apply();
    return Status::OK();
  }
  Result<bool> test() override {
    MS_ASSIGN_OR_RETURN(const bool finished, inner_.test());
    if (finished) apply();
    return finished;
  }

 private:
  // Every rank's part, its own included, from the messages: so every replica is the same.
  void apply() {
    const CompressConfig& c = owner_.config_;
    const CompressedBucket& b = owner_.buckets_[bucket_];
    const WireQuant q{c.weight_bits, c.weight_group_size, c.stochastic};
    const uint8_t* in = recv_.data();
    for (size_t r = 0; r < b.part_runs.size(); ++r) {
      decode_message(in, b.part_runs[r], q, values_ + static_cast<int64_t>(r) * b.part_numel,
                     c.weight_diff ? Decode::kAddQuantizedSetRaw : Decode::kSet);
      in += counts_[r];
    }
    send_ = {};
    recv_ = {};
  }

  CompressedDataParallel& owner_;
  size_t bucket_;
  float* values_;
  std::vector<uint8_t> send_, recv_;
  std::vector<size_t> counts_;  // bytes of each rank's message
  comm::Request inner_;
};

CompressedDataParallel::CompressedDataParallel(comm::Communicator& dp, CompressConfig config,
                                               std::vector<CompressedBucket> buckets)
    : dp_(dp), config_(config), buckets_(std::move(buckets)) {}

CompressedDataParallel::~CompressedDataParallel() = default;

Result<std::unique_ptr<CompressedDataParallel>> CompressedDataParallel::create(
    comm::Communicator& dp, const std::vector<int>& node_of_rank, const CompressConfig& config,
    std::vector<CompressedBucket> buckets) {
  if (node_of_rank.size() != static_cast<size_t>(dp.size())) {
    return InvalidArgument("compressed data parallelism: " + std::to_string(node_of_rank.size()) +
                           " node ids for a dp group of " + std::to_string(dp.size()));
  }
  for (const CompressedBucket& b : buckets) {
    if (b.part_runs.size() != static_cast<size_t>(dp.size())) {
      return InvalidArgument("compressed data parallelism: a bucket has " +
                             std::to_string(b.part_runs.size()) + " parts for dp " +
                             std::to_string(dp.size()));
    }
  }
  std::unique_ptr<CompressedDataParallel> self(
      new CompressedDataParallel(dp, config, std::move(buckets)));
  self->node_of_rank_ = node_of_rank;
  for (const CompressedBucket& b : self->buckets_) {
    self->residual_.emplace_back(config.error_feedback && config.grads_on()
                                     ? static_cast<size_t>(b.part_numel * dp.size())
                                     : 0,
                                 0.0f);
  }
  if (config.two_level) MS_RETURN_IF_ERROR(self->build_levels(node_of_rank));
  for (const CompressedBucket& b : self->buckets_) {
    self->inter_residual_.emplace_back(config.error_feedback && config.two_level
                                           ? static_cast<size_t>(b.part_numel * self->nodes_)
                                           : 0,
                                       0.0f);
  }
  return self;
}

// The two groups of the two-level scheme and who owns which part in them.
Status CompressedDataParallel::build_levels(const std::vector<int>& node_of_rank) {
  // Nodes numbered in order of their first dp rank, the same on every rank.
  std::map<int, int> index;
  std::vector<int> count;
  for (int node : node_of_rank) {
    if (index.emplace(node, static_cast<int>(index.size())).second) count.push_back(0);
    ++count[static_cast<size_t>(index[node])];
  }
  for (size_t n = 1; n < count.size(); ++n) {
    if (count[n] != count[0]) {
      return InvalidArgument(
          "parallel.compress.grads two-level needs the same number of dp ranks on every node; "
          "node " +
          std::to_string(n) + " has " + std::to_string(count[n]) + " and node 0 has " +
          std::to_string(count[0]) + " (set comm.ranks_per_node, or check the placement)");
    }
  }
  nodes_ = static_cast<int>(count.size());
  const int me = dp_.rank();
  const int node = index[node_of_rank[static_cast<size_t>(me)]];
  MS_ASSIGN_OR_RETURN(local_, dp_.split(node, me, dp_.name() + ".node"));
  const int l = local_->rank();
  MS_ASSIGN_OR_RETURN(cross_, dp_.split(l, node, dp_.name() + ".cross"));
  // owner_[l][n]: every rank's (local index, node) gathered, so all agree.
  int32_t mine[2] = {l, node};
  std::vector<int32_t> all(static_cast<size_t>(2 * dp_.size()));
  MS_RETURN_IF_ERROR(dp_.allgather(mine, all.data(), 2, DType::kI32));
  owner_.assign(static_cast<size_t>(local_->size()), std::vector<int>(count.size(), -1));
  for (int r = 0; r < dp_.size(); ++r) owner_[all[2 * r]][all[2 * r + 1]] = r;
  return Status::OK();
}

Result<comm::Request> CompressedDataParallel::reduce_scatter(size_t bucket, float* grads,
                                                             float* shard, int64_t step) {
  auto op = std::make_unique<GradExchange>(*this, bucket, shard, step);
  MS_RETURN_IF_ERROR(op->start(grads));
  return comm::Request(std::move(op));
}

Result<comm::Request> CompressedDataParallel::gather_weights(size_t bucket, const float* shard,
                                                             float* values, int64_t step) {
  auto op = std::make_unique<WeightExchange>(*this, bucket, values);
  MS_RETURN_IF_ERROR(op->start(shard, step));
  return comm::Request(std::move(op));
}

void CompressedDataParallel::add_residuals(size_t bucket, float* grads) {
  std::vector<float>& residual = residual_[bucket];
  for (size_t i = 0; i < residual.size(); ++i) grads[i] += residual[i];
  std::fill(residual.begin(), residual.end(), 0.0f);
  std::vector<float>& inter = inter_residual_[bucket];
  if (inter.empty()) return;
  const CompressedBucket& b = buckets_[bucket];
  const std::vector<int>& column = owner_[static_cast<size_t>(local_->rank())];
  for (int n = 0; n < nodes_; ++n) {
    float* r = inter.data() + n * b.part_numel;
    const int part = column[static_cast<size_t>(n)];
    // Kept in the Hadamard domain, where the partial sums were formed.
    if (config_.hadamard) hadamard_runs(r, b.part_runs[static_cast<size_t>(part)]);
    float* dst = grads + part * b.part_numel;
    for (int64_t i = 0; i < b.part_numel; ++i) dst[i] += r[i];
  }
  std::fill(inter.begin(), inter.end(), 0.0f);
}

CompressedTraffic CompressedDataParallel::take_traffic() {
  CompressedTraffic t = traffic_;
  traffic_ = {};
  return t;
}

}  // namespace ms::parallel
