// The pipeline schedule executor (pp_executor.h).
#include "parallel/pp_executor.h"

#include <deque>
#include <map>
#include <memory>
#include <string>

#include "core/timer.h"

namespace ms::parallel {
namespace {

constexpr int kMaxTag = 32767;  // the smallest MPI_TAG_UB the standard allows

bool is_recv(PpOp op) { return op == PpOp::kRecvActivation || op == PpOp::kRecvGrad; }

// Both sides name a message by its micro-batch, its destination virtual stage and its kind.
int message_tag(int mb, int dest_stage, bool grad, int stages) {
  return (mb * stages + dest_stage) * 2 + (grad ? 1 : 0);
}

struct PostedRecv {
  std::vector<float> buffer;
  comm::Request request;
};

struct PendingSend {
  std::unique_ptr<std::vector<float>> buffer;  // stays put while the send is in flight
  comm::Request request;
};

}  // namespace

Status run_pp_schedule(comm::Communicator& pp, const PpScheduleShape& shape,
                       std::span<const PpAction> actions, const PpCallbacks& callbacks,
                       const PpExecutorOptions& options) {
  MS_RETURN_IF_ERROR(check_pp_schedule(shape));
  if (pp.size() != shape.pp) {
    return InvalidArgument("the pipeline group has " + std::to_string(pp.size()) +
                           " ranks but the schedule is for pp " + std::to_string(shape.pp));
  }
  if (options.message_elements < 1 || options.recv_window < 1) {
    return InvalidArgument("pipeline messages need at least one element and a receive window >= 1");
  }
  const int stages = shape.pp * shape.vpp, rank = pp.rank();
  if (message_tag(shape.micro_batches - 1, stages - 1, true, stages) > kMaxTag) {
    return InvalidArgument("a pipeline step of " + std::to_string(shape.micro_batches) +
                           " micro-batches over " + std::to_string(stages) +
                           " virtual stages needs more message tags than MPI guarantees (" +
                           std::to_string(kMaxTag) + "); use fewer micro-batches per step");
  }
  const size_t n = static_cast<size_t>(options.message_elements);
  const auto tag_of = [&](const PpAction& a) {
    const int s = a.chunk * shape.pp + rank;
    const bool grad = a.op == PpOp::kRecvGrad || a.op == PpOp::kSendGrad;
    const bool incoming = is_recv(a.op);
    // An activation goes up a stage, a gradient down; a receive names this stage.
    const int dest = incoming ? s : (grad ? s - 1 : s + 1);
    return message_tag(a.micro_batch, dest, grad, stages);
  };

  std::map<int, PostedRecv> posted;  // by tag
  size_t next_to_post = 0;           // scan position for receives not yet posted
  const auto post_ahead = [&](size_t from) -> Status {
    int ahead = 0;
    for (const auto& [tag, r] : posted) ahead += r.request.done() ? 0 : 1;
    next_to_post = std::max(next_to_post, from);
    while (next_to_post < actions.size() && ahead < options.recv_window) {
      const PpAction& a = actions[next_to_post++];
      if (!is_recv(a.op)) continue;
      PostedRecv& r = posted[tag_of(a)];
      r.buffer.resize(n);
      MS_ASSIGN_OR_RETURN(r.request,
                          pp.irecv(r.buffer.data(), n, DType::kF32, a.peer, tag_of(a)));
      ++ahead;
    }
    return Status::OK();
  };
  std::deque<PendingSend> sends;
  const auto reap_sends = [&]() -> Status {
    while (!sends.empty()) {
      MS_ASSIGN_OR_RETURN(const bool done, sends.front().request.test());
      if (!done) break;
      sends.pop_front();
    }
    return Status::OK();
  };

  Status progress_error;
  if (options.progress != nullptr) {
    *options.progress = [&] {
      for (auto& [tag, r] : posted) {
        if (!progress_error.ok()) return;
        if (!r.request.done()) progress_error = r.request.test().status();
      }
      if (progress_error.ok()) progress_error = reap_sends();
    };
  }
  struct ResetProgress {
    std::function<void()>* progress;
    ~ResetProgress() {
      if (progress != nullptr) *progress = nullptr;
    }
  } reset_progress{options.progress};

  // What the last compute produced, for the send that follows it in the list.
  std::map<int, std::unique_ptr<std::vector<float>>> outgoing;  // by send tag
  std::map<int, std::vector<float>> received;                   // by tag, until consumed
  const std::vector<float> none;
  for (size_t i = 0; i < actions.size(); ++i) {
    const PpAction& a = actions[i];
    MS_RETURN_IF_ERROR(progress_error);
    MS_RETURN_IF_ERROR(post_ahead(i));
    MS_RETURN_IF_ERROR(reap_sends());
    const int s = a.chunk * shape.pp + rank;
    switch (a.op) {
      case PpOp::kRecvActivation:
      case PpOp::kRecvGrad: {
        const int tag = tag_of(a);
        auto it = posted.find(tag);
        if (it == posted.end()) {
          return Internal("pipeline receive of tag " + std::to_string(tag) + " was not posted");
        }
        const double t0 = wall_time_s();
        MS_RETURN_IF_ERROR(it->second.request.wait());
        const double t1 = wall_time_s();
        if (options.stats) options.stats->recv_wait_s += t1 - t0;
        if (options.on_p2p) options.on_p2p("recv", tag, n * sizeof(float), t0, t1);
        received[tag] = std::move(it->second.buffer);
        posted.erase(it);
        break;
      }
      case PpOp::kSendActivation:
      case PpOp::kSendGrad: {
        auto it = outgoing.find(tag_of(a));
        if (it == outgoing.end() || it->second->size() != n) {
          return FailedPrecondition("pipeline stage " + std::to_string(s) + " has no " +
                                    std::to_string(n) + "-element output to send for micro-batch " +
                                    std::to_string(a.micro_batch));
        }
        PendingSend send{std::move(it->second), {}};
        outgoing.erase(it);
        MS_ASSIGN_OR_RETURN(send.request,
                            pp.isend(send.buffer->data(), n, DType::kF32, a.peer, tag_of(a)));
        if (options.stats) {
          ++options.stats->messages_sent;
          options.stats->bytes_sent += n * sizeof(float);
        }
        if (options.on_p2p) {
          const double t = wall_time_s();
          options.on_p2p("send", tag_of(a), n * sizeof(float), t, t);
        }
        sends.push_back(std::move(send));
        break;
      }
      case PpOp::kForward: {
        const int in_tag = message_tag(a.micro_batch, s, false, stages);
        const auto in = received.find(in_tag);
        std::span<const float> input = in == received.end() ? std::span<const float>(none)
                                                            : std::span<const float>(in->second);
        if (s > 0 && in == received.end()) {
          return FailedPrecondition("pipeline forward of micro-batch " +
                                    std::to_string(a.micro_batch) + " before its input arrived");
        }
        auto out = std::make_unique<std::vector<float>>();
        MS_RETURN_IF_ERROR(callbacks.forward(a.micro_batch, a.chunk, input, *out));
        if (in != received.end()) received.erase(in);
        if (s + 1 < stages) outgoing[message_tag(a.micro_batch, s + 1, false, stages)] = std::move(out);
        break;
      }
      case PpOp::kBackward:
      case PpOp::kBackwardInput: {
        const int in_tag = message_tag(a.micro_batch, s, true, stages);
        const auto in = received.find(in_tag);
        if (s + 1 < stages && in == received.end()) {
          return FailedPrecondition("pipeline backward of micro-batch " +
                                    std::to_string(a.micro_batch) + " before its gradient arrived");
        }
        std::span<const float> grad_out = in == received.end() ? std::span<const float>(none)
                                                               : std::span<const float>(in->second);
        auto out = std::make_unique<std::vector<float>>();
        MS_RETURN_IF_ERROR(callbacks.backward(a.micro_batch, a.chunk, grad_out, *out));
        if (in != received.end()) received.erase(in);
        if (s > 0) outgoing[message_tag(a.micro_batch, s - 1, true, stages)] = std::move(out);
        break;
      }
      case PpOp::kBackwardWeight:
        MS_RETURN_IF_ERROR(callbacks.backward_weight(a.micro_batch, a.chunk));
        break;
    }
  }
  for (PendingSend& send : sends) MS_RETURN_IF_ERROR(send.request.wait());
  return progress_error;
}

}  // namespace ms::parallel
