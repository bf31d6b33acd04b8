#include "rl/rollout_exchange.h"

#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "comm/variable_length.h"

namespace ms::rl {
namespace {

// A flat little-endian record: the groups' count, then per group its rollouts' count and per
// rollout its fields. Both ends are this build on the same kind of machine.
class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  // Token ids, per-token log-probs: the count, then the elements.
  template <typename T>
  void put_array(const std::vector<T>& values) {
    put<uint64_t>(values.size());
    const auto* p = reinterpret_cast<const uint8_t*>(values.data());
    bytes.insert(bytes.end(), p, p + values.size() * sizeof(T));
  }
  void put_text(const std::string& text) {
    put<uint64_t>(text.size());
    bytes.insert(bytes.end(), text.begin(), text.end());
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  template <typename T>
  Status get(T& v) {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) return Corruption("rollout record truncated");
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return Status::OK();
  }
  template <typename T>
  Status get_array(std::vector<T>& values) {
    uint64_t n = 0;
    MS_RETURN_IF_ERROR(get(n));
    if (n > static_cast<uint64_t>(end_ - p_) / sizeof(T)) {
      return Corruption("rollout record truncated");
    }
    values.resize(n);
    std::memcpy(values.data(), p_, n * sizeof(T));
    p_ += n * sizeof(T);
    return Status::OK();
  }
  Status get_text(std::string& text) {
    uint64_t n = 0;
    MS_RETURN_IF_ERROR(get(n));
    if (n > static_cast<uint64_t>(end_ - p_)) return Corruption("rollout record truncated");
    text.assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return Status::OK();
  }
  bool done() const { return p_ == end_; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

std::vector<uint8_t> encode(const std::vector<RolloutGroup>& groups) {
  Writer w;
  w.put<uint64_t>(groups.size());
  for (const RolloutGroup& g : groups) {
    w.put<uint64_t>(g.size());
    for (const Rollout& r : g) {
      w.put<uint64_t>(r.prompt_index);
      w.put_array(r.sample.prompt);
      w.put_array(r.sample.response);
      w.put_text(r.text);
      w.put(r.reward);
      w.put<uint8_t>((r.correct ? 1 : 0) | (r.flawed ? 2 : 0) | (r.truncated ? 4 : 0));
      w.put_array(r.behavior.log_probs);
      w.put_array(r.behavior.entropy);
    }
  }
  return std::move(w.bytes);
}

Status decode(const uint8_t* data, size_t size, std::vector<RolloutGroup>& out) {
  Reader in(data, size);
  uint64_t groups = 0;
  MS_RETURN_IF_ERROR(in.get(groups));
  for (uint64_t k = 0; k < groups; ++k) {
    uint64_t n = 0;
    MS_RETURN_IF_ERROR(in.get(n));
    RolloutGroup& g = out.emplace_back();
    for (uint64_t i = 0; i < n; ++i) {
      Rollout& r = g.emplace_back();
      uint64_t index = 0;
      uint8_t flags = 0;
      MS_RETURN_IF_ERROR(in.get(index));
      MS_RETURN_IF_ERROR(in.get_array(r.sample.prompt));
      MS_RETURN_IF_ERROR(in.get_array(r.sample.response));
      MS_RETURN_IF_ERROR(in.get_text(r.text));
      MS_RETURN_IF_ERROR(in.get(r.reward));
      MS_RETURN_IF_ERROR(in.get(flags));
      MS_RETURN_IF_ERROR(in.get_array(r.behavior.log_probs));
      MS_RETURN_IF_ERROR(in.get_array(r.behavior.entropy));
      r.prompt_index = static_cast<size_t>(index);
      r.correct = (flags & 1) != 0;
      r.flawed = (flags & 2) != 0;
      r.truncated = (flags & 4) != 0;
    }
  }
  if (!in.done()) return Corruption("rollout record has trailing bytes");
  return Status::OK();
}

// The outcome of a step as the first rollout rank sends it: a flag, then the error, or the
// step's kept groups, counts, figures and prompt stream.
std::vector<uint8_t> encode_outcome(const Result<StepRollouts>& step) {
  static_assert(std::is_trivially_copyable_v<StepMetrics>);
  Writer w;
  w.put<uint8_t>(step.ok() ? 1 : 0);
  if (!step.ok()) {
    w.put<int32_t>(static_cast<int32_t>(step.status().code()));
    w.put_text(step.status().message());
    return std::move(w.bytes);
  }
  w.put(step->step);
  w.put(step->weight_version);
  w.put<uint64_t>(step->batch.kept.size());
  for (const GroupRef& g : step->batch.kept) {
    w.put(g.round);
    w.put(g.index);
  }
  w.put(step->batch.dropped);
  w.put(step->batch.surplus);
  w.put(step->batch.rounds);
  w.put(step->metrics);
  w.put_text(step->stream_after.encode());
  return std::move(w.bytes);
}

// Sets `step` to the outcome encode_outcome wrote; Corruption when the bytes do not parse.
Status decode_outcome(const std::string& bytes, Result<StepRollouts>& step) {
  Reader in(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  uint8_t ok = 0;
  MS_RETURN_IF_ERROR(in.get(ok));
  if (ok == 0) {
    int32_t code = 0;
    std::string message;
    MS_RETURN_IF_ERROR(in.get(code));
    MS_RETURN_IF_ERROR(in.get_text(message));
    step = Status(static_cast<StatusCode>(code), std::move(message));
    return Status::OK();
  }
  StepRollouts out;
  uint64_t kept = 0;
  MS_RETURN_IF_ERROR(in.get(out.step));
  MS_RETURN_IF_ERROR(in.get(out.weight_version));
  MS_RETURN_IF_ERROR(in.get(kept));
  if (kept > bytes.size()) return Corruption("rollout record truncated");
  out.batch.kept.resize(kept);
  for (GroupRef& g : out.batch.kept) {
    MS_RETURN_IF_ERROR(in.get(g.round));
    MS_RETURN_IF_ERROR(in.get(g.index));
  }
  MS_RETURN_IF_ERROR(in.get(out.batch.dropped));
  MS_RETURN_IF_ERROR(in.get(out.batch.surplus));
  MS_RETURN_IF_ERROR(in.get(out.batch.rounds));
  MS_RETURN_IF_ERROR(in.get(out.metrics));
  std::string stream;
  MS_RETURN_IF_ERROR(in.get_text(stream));
  if (!in.done()) return Corruption("rollout record has trailing bytes");
  MS_ASSIGN_OR_RETURN(out.stream_after, PromptStream::decode(stream));
  step = std::move(out);
  return Status::OK();
}

}  // namespace

Result<std::vector<RolloutGroup>> gather_rollout_groups(comm::Communicator& group,
                                                        const std::vector<RolloutGroup>& local) {
  if (group.size() == 1) return local;
  const std::vector<uint8_t> mine = encode(local);
  MS_ASSIGN_OR_RETURN(
      const std::vector<std::string> all,
      comm::all_gather_variable(group, std::string_view(reinterpret_cast<const char*>(mine.data()),
                                                        mine.size())));
  std::vector<RolloutGroup> out;
  for (size_t r = 0; r < all.size(); ++r) {
    MS_RETURN_IF_ERROR(decode(reinterpret_cast<const uint8_t*>(all[r].data()), all[r].size(), out)
                           .with_context("the rollouts of rank " + std::to_string(r) + " of " +
                                         group.name()));
  }
  return out;
}

Result<StepRollouts> hand_off_step_rollouts(comm::Communicator& world, int source,
                                            const Result<StepRollouts>& mine) {
  std::string outcome;
  if (world.rank() == source) {
    const std::vector<uint8_t> bytes = encode_outcome(mine);
    outcome.assign(bytes.begin(), bytes.end());
  }
  MS_RETURN_IF_ERROR(comm::broadcast_variable(world, outcome, source));
  Result<StepRollouts> step = Internal("no step");
  MS_RETURN_IF_ERROR(decode_outcome(outcome, step).with_context(
      "the rollout ranks' step from rank " + std::to_string(source)));
  MS_ASSIGN_OR_RETURN(StepRollouts out, std::move(step));
  static const std::vector<RolloutGroup> kNone;
  for (int64_t k = 0; k < out.batch.rounds; ++k) {
    const bool has = mine.ok() && k < static_cast<int64_t>(mine->rounds.size());
    MS_ASSIGN_OR_RETURN(std::vector<RolloutGroup> round,
                        gather_rollout_groups(world, has ? mine->rounds[static_cast<size_t>(k)]
                                                         : kNone));
    out.rounds.push_back(std::move(round));
  }
  return out;
}

}  // namespace ms::rl
