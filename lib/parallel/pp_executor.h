// Runs one rank's pipeline schedule (pp_schedule.h) over the pipeline group (issue 13, item 3):
// activations and gradients travel by nonblocking point-to-point, receives posted ahead of
// when the schedule needs them (a window of upcoming receives, so a transfer moves while this
// rank computes) and sends never waited for until the step ends, as MegaScale decouples sends
// from receives. The compute is the caller's: callbacks per forward and backward pass.
//
// Collective over `pp` in the sense that every pipeline rank runs its own list of the same
// schedule; messages are matched by tag (micro-batch, destination virtual stage, kind), so the
// order in which they are posted does not matter. Every message is `message_elements` floats
// (the (tokens, d_model) activation of one micro-batch).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "parallel/pp_schedule.h"

namespace ms::parallel {

struct PpCallbacks {
  // input: the activation from the previous virtual stage (empty on stage 0). Fills output
  // (message_elements floats) unless this is the last virtual stage.
  std::function<Status(int mb, int chunk, std::span<const float> input,
                       std::vector<float>& output)>
      forward;
  // grad_out: the gradient from the next virtual stage (empty on the last). Fills grad_in
  // (message_elements floats) unless this is stage 0. For kBackward the weight gradients too;
  // for kBackwardInput only the input gradient (backward_weight follows later).
  std::function<Status(int mb, int chunk, std::span<const float> grad_out,
                       std::vector<float>& grad_in)>
      backward;
  std::function<Status(int mb, int chunk)> backward_weight;
};

struct PpP2pStats {
  int64_t messages_sent = 0;
  uint64_t bytes_sent = 0;
  double recv_wait_s = 0;  // blocked in receives: the transfers not hidden behind compute
};

struct PpExecutorOptions {
  int64_t message_elements = 0;
  int recv_window = 4;  // receives posted ahead of need (at least 1)
  PpP2pStats* stats = nullptr;
  // Every transfer, for traces: op "send" (t0 = t1 = when it was posted; a send is never
  // waited for) or "recv" (t0 when this rank started waiting for it, t1 when the wait
  // returned), the message tag (the same at both ends) and its bytes.
  std::function<void(const char* op, int tag, uint64_t bytes, double t0, double t1)> on_p2p;
  // Set by run_pp_schedule while it runs (and reset after) to a function that tests the
  // transfers in flight: call it between compute chunks (BackwardHooks::poll) so that MPI,
  // which progresses nonblocking transfers only inside its calls, moves them meanwhile.
  std::function<void()>* progress = nullptr;
};

// InvalidArgument for a bad shape (check_pp_schedule), a group whose size is not shape.pp, a
// message size < 1, or a step whose tags would exceed what MPI guarantees (32767); the
// callbacks' and the transport's errors otherwise.
Status run_pp_schedule(comm::Communicator& pp, const PpScheduleShape& shape,
                       std::span<const PpAction> actions, const PpCallbacks& callbacks,
                       const PpExecutorOptions& options);

}  // namespace ms::parallel
