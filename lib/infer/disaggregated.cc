// The two sides of disaggregated MoE serving (infer/disaggregated.h): RemoteExperts on the
// attention ranks, serve_experts on the expert ranks, and the message order they share.
#include "infer/disaggregated.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include "core/timer.h"

namespace ms::infer {
namespace {

// One tag per message kind; MPI keeps messages of one (source, tag) in order.
constexpr int kControlTag = 7101;  // i64: micro-batches in this step, 0 = finished
constexpr int kCountsTag = 7102;   // i64 per expert of the receiving rank: rows routed to it
constexpr int kRowsTag = 7103;     // f32 (rows, d_model), grouped by expert
constexpr int kResultsTag = 7104;  // f32 (rows, d_model), the experts' outputs, same order

Status wait_all(std::vector<comm::Request>& requests) {
  for (comm::Request& r : requests) MS_RETURN_IF_ERROR(r.wait());
  requests.clear();
  return Status::OK();
}

int64_t chunk_tokens(const model::CachedChunk& c) { return static_cast<int64_t>(c.tokens.size()); }

}  // namespace

Result<ServingLayout> ServingLayout::create(int world, int attention, int64_t num_experts) {
  if (num_experts < 1) {
    return InvalidArgument(
        "disaggregated serving needs a MoE model (model.moe.num_experts > 0); serve a dense "
        "model colocated");
  }
  if (attention < 1 || attention >= world) {
    return InvalidArgument("--attention-ranks " + std::to_string(attention) + " must be between 1 " +
                           "and the number of ranks minus one (" + std::to_string(world - 1) +
                           "), leaving at least one expert rank");
  }
  if (world - attention > num_experts) {
    return InvalidArgument(std::to_string(world - attention) + " expert ranks for " +
                           std::to_string(num_experts) +
                           " experts would leave a rank without experts; use more attention "
                           "ranks or fewer ranks");
  }
  return ServingLayout{world, attention, num_experts};
}

int64_t ServingLayout::first_expert(int r) const {
  return static_cast<int64_t>(r) * num_experts / expert_ranks();
}

int ServingLayout::owner(int64_t e) const {
  int r = static_cast<int>(e * expert_ranks() / num_experts);
  while (r + 1 < expert_ranks() && first_expert(r + 1) <= e) ++r;
  while (r > 0 && first_expert(r) > e) --r;
  return r;
}

std::vector<std::span<const model::CachedChunk>> split_micro_batches(
    std::span<const model::CachedChunk> chunks, int m) {
  std::vector<std::span<const model::CachedChunk>> groups;
  const size_t n = chunks.size();
  const size_t count = std::min(n, static_cast<size_t>(std::max(m, 1)));
  int64_t left = 0;
  for (const model::CachedChunk& c : chunks) left += chunk_tokens(c);
  size_t begin = 0;
  for (size_t g = 0; g < count; ++g) {
    const size_t groups_left = count - g;
    size_t end = begin + 1;
    int64_t tokens = chunk_tokens(chunks[begin]);
    const double target = static_cast<double>(left) / static_cast<double>(groups_left);
    while (end < n - (groups_left - 1) &&
           (groups_left == 1 || static_cast<double>(tokens) < target)) {
      tokens += chunk_tokens(chunks[end]);
      ++end;
    }
    groups.push_back(chunks.subspan(begin, end - begin));
    left -= tokens;
    begin = end;
  }
  return groups;
}

// One micro-batch between its stages, with the messages of its current MoE layer.
struct RemoteExperts::InFlight {
  model::CachedPass pass;
  std::vector<std::vector<int64_t>> counts;  // per expert rank, rows per expert
  std::vector<float> expert_out;             // (rows, d_model) in dispatch order
  std::vector<comm::Request> requests;
};

RemoteExperts::RemoteExperts(model::Transformer& model, comm::Communicator& comm,
                             const ServingLayout& layout, int micro_batches)
    : model_(model), comm_(comm), layout_(layout), micro_batches_(std::max(micro_batches, 1)) {}

// Sends each expert rank its experts' row counts and rows, and posts the receives of their
// outputs straight into f.expert_out.
Status RemoteExperts::dispatch(InFlight& f) {
  const std::span<const int64_t> offsets = f.pass.dispatch_offsets();
  const std::span<const float> rows = f.pass.dispatch_rows();
  const int64_t D = model_.config().d_model;
  f.expert_out.resize(rows.size());
  f.counts.resize(static_cast<size_t>(layout_.expert_ranks()));
  for (int r = 0; r < layout_.expert_ranks(); ++r) {
    const int64_t e0 = layout_.first_expert(r), e1 = layout_.first_expert(r + 1);
    std::vector<int64_t>& counts = f.counts[static_cast<size_t>(r)];
    counts.clear();
    for (int64_t e = e0; e < e1; ++e) counts.push_back(offsets[e + 1] - offsets[e]);
    const int dest = layout_.attention + r;
    MS_ASSIGN_OR_RETURN(comm::Request c,
                        comm_.isend(counts.data(), counts.size(), DType::kI64, dest, kCountsTag));
    f.requests.push_back(std::move(c));
    const size_t begin = static_cast<size_t>(offsets[e0] * D);
    const size_t n = static_cast<size_t>((offsets[e1] - offsets[e0]) * D);
    stats_.bytes_sent += static_cast<int64_t>(counts.size() * sizeof(int64_t));
    if (n == 0) continue;
    MS_ASSIGN_OR_RETURN(comm::Request s,
                        comm_.isend(rows.data() + begin, n, DType::kF32, dest, kRowsTag));
    MS_ASSIGN_OR_RETURN(comm::Request q, comm_.irecv(f.expert_out.data() + begin, n, DType::kF32,
                                                     dest, kResultsTag));
    f.requests.push_back(std::move(s));
    f.requests.push_back(std::move(q));
    stats_.bytes_sent += static_cast<int64_t>(n * sizeof(float));
    stats_.bytes_received += static_cast<int64_t>(n * sizeof(float));
  }
  stats_.rows += offsets.back();
  return Status::OK();
}

void RemoteExperts::progress(std::vector<InFlight>& flights) {
  for (InFlight& f : flights) {
    for (comm::Request& r : f.requests) {
      const Result<bool> done = r.test();
      if (!done.ok() && progress_error_.ok()) progress_error_ = done.status();
    }
  }
}

// Waits for f's expert outputs (the pipeline's idle time on this side) and finishes its layer.
Status RemoteExperts::collect(InFlight& f) {
  const Stopwatch wait;
  MS_RETURN_IF_ERROR(progress_error_);
  MS_RETURN_IF_ERROR(wait_all(f.requests));
  stats_.wait_s += wait.elapsed_s();
  return model_.apply_experts(f.pass, f.expert_out);
}

Result<Tensor> RemoteExperts::forward(std::span<const model::CachedChunk> chunks,
                                      const model::PagedKvCache& cache) {
  const Stopwatch total;
  const double wait_before = stats_.wait_s;
  const std::vector<std::span<const model::CachedChunk>> groups =
      split_micro_batches(chunks, micro_batches_);
  std::vector<InFlight> flights(groups.size());
  // Every micro-batch is validated before the expert ranks hear of the step.
  for (size_t i = 0; i < groups.size(); ++i) {
    MS_ASSIGN_OR_RETURN(flights[i].pass, model_.begin_cached(groups[i], cache));
  }
  const int64_t control = static_cast<int64_t>(groups.size());
  for (int r = 0; r < layout_.expert_ranks(); ++r) {
    MS_RETURN_IF_ERROR(comm_.send(&control, 1, DType::kI64, layout_.attention + r, kControlTag));
  }
  const std::function<void()> poll = [&] { progress(flights); };
  for (InFlight& f : flights) {
    model_.run_to_experts(f.pass, poll);
    MS_RETURN_IF_ERROR(dispatch(f));
  }
  for (bool pending = true; pending;) {
    pending = false;
    for (InFlight& f : flights) {
      if (!f.pass.awaiting_experts()) continue;
      pending = true;
      MS_RETURN_IF_ERROR(collect(f));
      model_.run_to_experts(f.pass, poll);
      if (f.pass.awaiting_experts()) MS_RETURN_IF_ERROR(dispatch(f));
    }
  }
  // A speculative verify chunk (all_logits) gets a row per token, any other chunk one row.
  int64_t rows = 0;
  for (const model::CachedChunk& c : chunks) rows += c.all_logits ? chunk_tokens(c) : 1;
  Tensor logits = Tensor::empty(DType::kF32, {rows, model_.config().vocab_size});
  float* out = logits.data<float>();
  for (InFlight& f : flights) {
    MS_ASSIGN_OR_RETURN(Tensor part, model_.cached_logits(f.pass));
    std::memcpy(out, part.raw_data(), part.nbytes());
    out += part.numel();
  }
  ++stats_.steps;
  stats_.micro_batches += static_cast<int64_t>(groups.size());
  stats_.busy_s += total.elapsed_s() - (stats_.wait_s - wait_before);
  return logits;
}

Status RemoteExperts::finish() {
  const int64_t done = 0;
  for (int r = 0; r < layout_.expert_ranks(); ++r) {
    MS_RETURN_IF_ERROR(comm_.send(&done, 1, DType::kI64, layout_.attention + r, kControlTag));
  }
  return Status::OK();
}

namespace {

// What one attention rank sent for one (layer, micro-batch) round, and the outputs going back.
struct Inbox {
  std::vector<int64_t> counts;  // rows per local expert
  std::vector<int64_t> starts;  // first row of each local expert within `rows`
  std::vector<float> rows, out;
  int64_t total = 0;
};

// The expert rank's state across rounds: which attention ranks still serve, and two sets of
// inboxes used alternately so a round can fill one while the other's outputs are in flight.
class ExpertServer {
 public:
  ExpertServer(model::Transformer& model, comm::Communicator& comm, const ServingLayout& layout)
      : model_(model),
        comm_(comm),
        layout_(layout),
        index_(comm.rank() - layout.attention),
        e0_(layout.first_expert(index_)),
        e1_(layout.first_expert(index_ + 1)) {
    for (auto& set : inboxes_) set.resize(static_cast<size_t>(layout.attention));
    for (int a = 0; a < layout.attention; ++a) active_.push_back(a);
  }

  Status run() {
    while (true) {
      MS_ASSIGN_OR_RETURN(std::vector<int64_t> micro, receive_controls());
      if (active_.empty()) break;
      const int64_t rounds = *std::max_element(micro.begin(), micro.end());
      for (int64_t l = 0; l < model_.config().n_layers; ++l) {
        for (int64_t i = 0; i < rounds; ++i) {
          std::vector<int> members;
          for (size_t k = 0; k < active_.size(); ++k) {
            if (micro[k] > i) members.push_back(active_[k]);
          }
          MS_RETURN_IF_ERROR(serve_round(static_cast<size_t>(l), members));
        }
      }
      ++stats_.steps;
      stats_.micro_batches += rounds;
    }
    for (auto& s : sends_) MS_RETURN_IF_ERROR(wait_all(s));
    return Status::OK();
  }

  const PipelineStats& stats() const { return stats_; }

 private:
  // Micro-batch counts of the still-active attention ranks for the next step; those that
  // finished leave `active_`.
  Result<std::vector<int64_t>> receive_controls() {
    const Stopwatch wait;
    std::vector<int64_t> micro;
    std::vector<int> still;
    for (int a : active_) {
      int64_t m = 0;
      MS_RETURN_IF_ERROR(comm_.recv(&m, 1, DType::kI64, a, kControlTag));
      if (m == 0) continue;
      still.push_back(a);
      micro.push_back(m);
    }
    active_ = std::move(still);
    stats_.wait_s += wait.elapsed_s();
    return micro;
  }

  Status receive_round(std::vector<Inbox>& box, const std::vector<int>& members) {
    const int64_t D = model_.config().d_model, local = e1_ - e0_;
    std::vector<comm::Request> requests;
    for (int a : members) {
      Inbox& in = box[static_cast<size_t>(a)];
      in.counts.assign(static_cast<size_t>(local), 0);
      MS_ASSIGN_OR_RETURN(comm::Request r, comm_.irecv(in.counts.data(), in.counts.size(),
                                                       DType::kI64, a, kCountsTag));
      requests.push_back(std::move(r));
    }
    MS_RETURN_IF_ERROR(wait_all(requests));
    for (int a : members) {
      Inbox& in = box[static_cast<size_t>(a)];
      in.starts.assign(1, 0);
      for (int64_t c : in.counts) in.starts.push_back(in.starts.back() + c);
      in.total = in.starts.back();
      in.rows.resize(static_cast<size_t>(in.total * D));
      stats_.bytes_received += static_cast<int64_t>(in.counts.size() * sizeof(int64_t)) +
                               static_cast<int64_t>(in.rows.size() * sizeof(float));
      if (in.total == 0) continue;
      MS_ASSIGN_OR_RETURN(comm::Request r,
                          comm_.irecv(in.rows.data(), in.rows.size(), DType::kF32, a, kRowsTag));
      requests.push_back(std::move(r));
    }
    return wait_all(requests);
  }

  // Receives one round's rows from every member, runs the local experts over all of them at
  // once, and sends each member its outputs.
  Status serve_round(size_t layer, const std::vector<int>& members) {
    const size_t parity = static_cast<size_t>(round_++ & 1);
    std::vector<Inbox>& box = inboxes_[parity];
    const Stopwatch wait;
    MS_RETURN_IF_ERROR(wait_all(sends_[parity]));
    MS_RETURN_IF_ERROR(receive_round(box, members));
    stats_.wait_s += wait.elapsed_s();
    const Stopwatch busy;
    const int64_t D = model_.config().d_model, E = layout_.num_experts;
    std::vector<int64_t> offsets(static_cast<size_t>(E + 1), 0);
    for (int64_t e = 0; e < E; ++e) {
      int64_t rows = 0;
      if (e >= e0_ && e < e1_) {
        for (int a : members) rows += box[static_cast<size_t>(a)].counts[e - e0_];
      }
      offsets[e + 1] = offsets[e] + rows;
    }
    const size_t total = static_cast<size_t>(offsets[E] * D);
    x_.resize(total);
    y_.resize(total);
    gather_rows(box, members, offsets, false);
    MS_RETURN_IF_ERROR(model_.run_experts(layer, offsets, x_.data(), y_.data()));
    for (int a : members) box[static_cast<size_t>(a)].out.resize(box[static_cast<size_t>(a)].rows.size());
    gather_rows(box, members, offsets, true);
    for (int a : members) {
      Inbox& in = box[static_cast<size_t>(a)];
      if (in.total == 0) continue;
      MS_ASSIGN_OR_RETURN(comm::Request r, comm_.isend(in.out.data(), in.out.size(), DType::kF32,
                                                       a, kResultsTag));
      sends_[parity].push_back(std::move(r));
      stats_.bytes_sent += static_cast<int64_t>(in.out.size() * sizeof(float));
    }
    stats_.rows += offsets[E];
    stats_.busy_s += busy.elapsed_s();
    return Status::OK();
  }

  // Between the members' inboxes (each grouped by local expert) and x_/y_ (grouped by expert
  // across members, in member order): copies rows in (back = false) or outputs back.
  void gather_rows(std::vector<Inbox>& box, const std::vector<int>& members,
                   const std::vector<int64_t>& offsets, bool back) {
    const int64_t D = model_.config().d_model;
    for (int64_t e = e0_; e < e1_; ++e) {
      int64_t at = offsets[e];
      for (int a : members) {
        Inbox& in = box[static_cast<size_t>(a)];
        const int64_t n = in.counts[e - e0_] * D, from = in.starts[e - e0_] * D;
        if (back) {
          std::copy_n(y_.data() + at * D, n, in.out.data() + from);
        } else {
          std::copy_n(in.rows.data() + from, n, x_.data() + at * D);
        }
        at += in.counts[e - e0_];
      }
    }
  }

  model::Transformer& model_;
  comm::Communicator& comm_;
  ServingLayout layout_;
  int index_;
  int64_t e0_, e1_;
  std::vector<int> active_;
  std::vector<Inbox> inboxes_[2];
  std::vector<comm::Request> sends_[2];
  std::vector<float> x_, y_;
  int64_t round_ = 0;
  PipelineStats stats_;
};

}  // namespace

Result<PipelineStats> serve_experts(model::Transformer& model, comm::Communicator& comm,
                                    const ServingLayout& layout) {
  if (layout.is_attention(comm.rank())) {
    return InvalidArgument("serve_experts on rank " + std::to_string(comm.rank()) +
                           ", an attention rank");
  }
  ExpertServer server(model, comm, layout);
  MS_RETURN_IF_ERROR(server.run());
  return server.stats();
}

}  // namespace ms::infer
