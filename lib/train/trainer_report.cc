// The trainer's end-of-run reports: how much of each kind of communication (dp, tp, ep, cp,
// pipeline) the overlap hid, the attention's share and peak memory, data wait, checkpoint
// writes against the step time, skipped updates; then the telemetry and trace are closed.
#include "train/trainer.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/host_metrics.h"
#include "core/logging.h"
#include "model/transformer.h"
#include "ops/backend_registry.h"
#include "train/trainer_state.h"

namespace ms::train {

// The longest time any trainer waited for its micro-batches (local reads or, with loader ranks,
// the transfer from them): the figure that says whether data loading kept up. Collective.
Status Trainer::log_data_wait(const TrainSummary& summary) {
  const int64_t steps = summary.steps_done - s_->start_step;
  // In microseconds: the communicators reduce no f64, and a log line needs no more precision.
  int64_t micros[2] = {std::llround(summary.data_wait_s * 1e6), std::llround(summary.step_time_s * 1e6)};
  MS_RETURN_IF_ERROR(trainers().allreduce(micros, micros, 2, DType::kI64, comm::ReduceOp::kMax));
  if (steps <= 0) return Status::OK();
  const double wait[2] = {static_cast<double>(micros[0]) / 1e6, static_cast<double>(micros[1]) / 1e6};
  char line[240];
  std::snprintf(line, sizeof(line),
                "data wait: %.3fs over %lld steps (%.1f%% of the step time, slowest trainer; %s)",
                wait[0], static_cast<long long>(steps), wait[1] > 0 ? wait[0] / wait[1] * 100.0 : 0.0,
                s_->loaders > 0 ? "batches from the loader ranks" : "local loaders");
  MS_LOG(Info) << line;
  return Status::OK();
}

// Compressed dp communication's bytes against full precision, and the simulated link's bytes
// per group and how much of its time the overlap hid (this rank's figures).
void Trainer::log_compression(const TrainSummary& summary) const {
  const int64_t steps = summary.steps_done - s_->start_step;
  const parallel::CompressedTraffic& t = summary.dp_compressed;
  constexpr double kMiB = 1024.0 * 1024.0;
  if (steps > 0 && t.full_precision_bytes > 0) {
    const uint64_t sent = t.grad_bytes + t.weight_bytes;
    char line[320];
    std::snprintf(line, sizeof(line),
                  "dp compression: sent %.3f MiB per step (gradients %.3f, of them %.3f to other "
                  "nodes; weights %.3f) against %.3f MiB in full precision: %.2fx fewer bytes "
                  "(full-precision steps excluded)",
                  static_cast<double>(sent) / steps / kMiB,
                  static_cast<double>(t.grad_bytes) / steps / kMiB,
                  static_cast<double>(t.grad_inter_node_bytes) / steps / kMiB,
                  static_cast<double>(t.weight_bytes) / steps / kMiB,
                  static_cast<double>(t.full_precision_bytes) / steps / kMiB,
                  sent > 0 ? static_cast<double>(t.full_precision_bytes) / static_cast<double>(sent)
                           : 0.0);
    MS_LOG(Info) << line;
  }
  if (!s_->link || steps <= 0) return;
  for (const auto& [group, traffic] : s_->link->traffic()) {
    // Groups that only sum a few scalars a step (the loss, flags) are not worth a line.
    if (traffic.inter_node_bytes + traffic.intra_node_bytes < 1024 * static_cast<uint64_t>(steps)) {
      continue;
    }
    char line[320];
    std::snprintf(line, sizeof(line),
                  "simulated link (%.1f Gb/s, %.0f us): %s sent %.3f MiB per step to other nodes "
                  "and %.3f within its node; link time %.3fs, of which %.3fs waited for "
                  "(%.0f%% hidden)",
                  config_.comm.simulate_link.gbps, config_.comm.simulate_link.latency_us,
                  group.c_str(), static_cast<double>(traffic.inter_node_bytes) / steps / kMiB,
                  static_cast<double>(traffic.intra_node_bytes) / steps / kMiB, traffic.delay_s,
                  traffic.waited_s,
                  traffic.delay_s > 0 ? (1.0 - traffic.waited_s / traffic.delay_s) * 100.0 : 0.0);
    MS_LOG(Info) << line;
  }
}

// Closes the writers and logs the run's summary, including how much of the gradient
// reduction the overlap hid.
Status Trainer::finish(TrainSummary& summary) {
  const parallel::CommStats& c = summary.comm;
  if (s_->dp > 1 && summary.steps_done > 0) {
    char line[300];
    std::snprintf(line, sizeof(line),
                  "data-parallel gradient reduction: %lld collectives, %.1f MiB per step; "
                  "%.0f%% hidden behind backward (waited %.3fs of %.3fs)",
                  static_cast<long long>(c.collectives / summary.steps_done),
                  static_cast<double>(c.bytes) / summary.steps_done / (1024.0 * 1024.0),
                  c.hidden_fraction() * 100.0, c.exposed_s, c.active_s);
    MS_LOG(Info) << line;
  }
  log_compression(summary);
  // "Up to": a chunk's completion is only seen when the model polls between GEMMs, so the
  // time in flight includes compute the transfer may not have used.
  const parallel::CommStats& t = summary.tp_comm;
  if (s_->model->tp_size() > 1 && summary.steps_done > 0 && t.collectives > 0) {
    const double steps = static_cast<double>(summary.steps_done - s_->start_step);
    const std::string mode =
        config_.parallel.tp_overlap
            ? "parallel.tp_overlap in " + std::to_string(config_.parallel.tp_overlap_chunks) +
                  " chunks"
            : "parallel.tp_overlap off";
    char line[320];
    std::snprintf(line, sizeof(line),
                  "tensor-parallel communication: %.0f collectives, %.1f MiB per step; up to "
                  "%.0f%% hidden behind compute (waited %.3fs of %.3fs in flight; %s)",
                  static_cast<double>(t.collectives) / steps,
                  static_cast<double>(t.bytes) / steps / (1024.0 * 1024.0),
                  t.hidden_fraction() * 100.0, t.exposed_s, t.active_s, mode.c_str());
    MS_LOG(Info) << line;
  }
  if (config_.parallel.ep > 1 && summary.steps_done > s_->start_step) {
    const double steps = static_cast<double>(summary.steps_done - s_->start_step);
    const parallel::CommStats& e = s_->ep_stats;
    char line[400];
    std::snprintf(line, sizeof(line),
                  "expert-parallel all-to-all: %.0f all-to-alls, %.1f MiB sent to other ranks "
                  "per step; up to %.0f%% hidden behind compute (waited %.3fs of %.3fs in "
                  "flight; ep %lld, parallel.ep_overlap_chunks %lld; rank 0)",
                  static_cast<double>(e.collectives) / steps,
                  static_cast<double>(e.bytes) / steps / (1024.0 * 1024.0),
                  e.hidden_fraction() * 100.0, e.exposed_s, e.active_s,
                  static_cast<long long>(config_.parallel.ep),
                  static_cast<long long>(config_.parallel.ep_overlap_chunks));
    MS_LOG(Info) << line;
  }
  if (summary.steps_done > s_->start_step) {
    // The attention's share (with cp its ring) and this process's peak memory: what context
    // parallelism divides, measured (scripts/bench/train_cp_bench.sh reads both).
    std::string peak = "unknown";
    if (Result<std::string> status = read_text_file("/proc/self/status"); status.ok()) {
      if (Result<uint64_t> bytes = parse_peak_rss_bytes(*status); bytes.ok()) {
        peak = std::to_string(*bytes / (1024 * 1024)) + " MiB";
      }
    }
    char line[300];
    std::snprintf(line, sizeof(line),
                  "attention %.3fs of %.3fs of steps (forward and backward); peak resident "
                  "memory %s (VmHWM; rank 0)",
                  s_->attention_s, summary.step_time_s, peak.c_str());
    MS_LOG(Info) << line;
  }
  if (config_.parallel.cp > 1 && summary.steps_done > s_->start_step) {
    const double steps = static_cast<double>(summary.steps_done - s_->start_step);
    const parallel::CommStats& c = s_->cp_stats;
    char line[400];
    std::snprintf(line, sizeof(line),
                  "context-parallel ring attention: %.0f transfers, %.1f MiB sent per step; up "
                  "to %.0f%% hidden behind attention (waited %.3fs of %.3fs in flight; cp %lld; "
                  "rank 0)",
                  static_cast<double>(c.collectives) / steps,
                  static_cast<double>(c.bytes) / steps / (1024.0 * 1024.0),
                  c.hidden_fraction() * 100.0, c.exposed_s, c.active_s,
                  static_cast<long long>(config_.parallel.cp));
    MS_LOG(Info) << line;
  }
  if (config_.model.moe.capacity_factor > 0 && summary.steps_done > s_->start_step) {
    MS_LOG(Info) << "model.moe.capacity_factor " << config_.model.moe.capacity_factor
                 << " dropped " << summary.dropped_tokens
                 << " expert assignment(s) over the run (every rank, every layer)";
  }
  if (s_->pipeline_step && summary.steps_done > s_->start_step) {
    const double steps = static_cast<double>(summary.steps_done - s_->start_step);
    const parallel::PpP2pStats& p = s_->pp_stats;
    char line[300];
    std::snprintf(line, sizeof(line),
                  "pipeline point-to-point: %.0f messages, %.1f MiB sent per step by this rank; "
                  "%.3fs of the run blocked in receives (rank 0)",
                  static_cast<double>(p.messages_sent) / steps,
                  static_cast<double>(p.bytes_sent) / steps / (1024.0 * 1024.0), p.recv_wait_s);
    MS_LOG(Info) << line;
  }
  MS_RETURN_IF_ERROR(log_data_wait(summary));
  if (summary.steps_while_saving > 0 && summary.steps_not_saving > 0) {
    const double during = summary.time_while_saving_s / summary.steps_while_saving;
    const double other = summary.time_not_saving_s / summary.steps_not_saving;
    char line[240];
    std::snprintf(line, sizeof(line),
                  "checkpoint writes: %lld step(s) ran while a save was writing, %.3fs each "
                  "against %.3fs without (%.2fx the speed; rank 0)",
                  static_cast<long long>(summary.steps_while_saving), during, other,
                  during > 0 ? other / during : 0.0);
    MS_LOG(Info) << line;
  }
  if (summary.skipped_updates > 0) {
    MS_LOG(Info) << "the spike guard skipped " << summary.skipped_updates << " update(s)";
  }
  if (s_->trace) MS_RETURN_IF_ERROR(s_->trace->flush());
  return s_->telemetry->close();
}

}  // namespace ms::train
