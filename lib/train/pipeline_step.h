// One training step's forward and backward under pipeline parallelism (issue 13): this rank's
// model chunks run the micro-batches in the order of its schedule (parallel/pp_schedule.h),
// executed by parallel/pp_executor.h, which moves activations and gradients between the
// stages by nonblocking point-to-point (receives posted ahead, sends never waited for until
// the step ends) and progresses them while the chunks compute. Afterwards the tied
// embedding's two copies (first and last stage) have their gradients summed over the
// embedding group, and the step's loss is shared over the pipeline.
//
// Every forward, backward part and transfer is traced per micro-batch (docs/formats/
// telemetry.md): compute ops "fwd", "bwd" or "bwd_input" and "bwd_weight" with the virtual
// stage, p2p ops "send" and "recv" in the pipeline group with a sequence number both ends
// share.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "data/loader.h"
#include "model/transformer.h"
#include "ops/backend.h"
#include "parallel/pp_executor.h"
#include "parallel/pp_schedule.h"
#include "telemetry/writer.h"

namespace ms::train {

// What one rank did in a pipeline step.
struct PipelineStepResult {
  double loss = 0;  // the mean loss over the step's micro-batches (the same on every pp rank)
  double aux = 0;   // the mean MoE aux loss over them, all stages' layers (likewise)
  double z = 0;     // the mean router z-loss, likewise
  double fwd_s = 0, bwd_s = 0;  // compute time in forwards and in backward parts
  parallel::PpP2pStats p2p;
};

class PipelineStep {
 public:
  // chunks[c] is this rank's chunk c (virtual stage c * pp + rank); `pp` the pipeline group;
  // `trace` may be null; its p2p events carry `trace_group`. InvalidArgument when the
  // schedule does not fit (check_pp_schedule) or the chunks do not match it. Everything must
  // outlive this object.
  static Result<std::unique_ptr<PipelineStep>> create(comm::Communicator& pp,
                                                      const parallel::PpScheduleShape& shape,
                                                      std::vector<model::Transformer*> chunks,
                                                      telemetry::TraceWriter* trace,
                                                      std::string trace_group);

  // Runs the step's micro-batches (every pp rank passes the same ones: the first stage reads
  // their inputs, the last their targets), then sums the tied embedding's gradient over the
  // embedding group and shares the loss over pp. Collective over the pipeline group.
  Result<PipelineStepResult> run(int64_t step, std::span<const data::MicroBatch> batches);
  // The mean loss of `batches` without gradients (evaluation): each micro-batch passes the
  // virtual stages in order, by blocking transfers. The same on every pp rank. Collective.
  Result<double> evaluate(std::span<const data::MicroBatch> batches);
  // Test-only (debug.slow_ms): seconds this rank sleeps before each forward, a slow stage.
  void set_forward_delay(double seconds) { forward_delay_s_ = seconds; }

 private:
  PipelineStep(comm::Communicator& pp, const parallel::PpScheduleShape& shape,
               std::vector<model::Transformer*> chunks, telemetry::TraceWriter* trace)
      : pp_(pp), shape_(shape), chunks_(std::move(chunks)), trace_(trace) {}
  Status sum_tied_embedding();

  comm::Communicator& pp_;
  parallel::PpScheduleShape shape_;
  std::vector<model::Transformer*> chunks_;
  telemetry::TraceWriter* trace_;
  std::string trace_group_;  // the name the pipeline group's transfers carry in the trace
  std::vector<parallel::PpAction> actions_;
  std::vector<float> tied_peer_;  // the other copy's gradient, received
  ops::Backend* be_ = &ops::cpu_backend();  // where the gradients live (the host for now)
  double forward_delay_s_ = 0;
};

}  // namespace ms::train
