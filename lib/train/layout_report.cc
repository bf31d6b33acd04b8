// The dry-run layout report (layout_report.h).
#include "train/layout_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "comm/mesh.h"
#include "model/transformer.h"
#include "parallel/pp_placement.h"
#include "parallel/pp_schedule.h"
#include "parallel/tp_layout.h"
#include "parallel/tp_shards.h"
#include "train/run_checks.h"

namespace ms::train {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string box_string(const comm::ShardSpec& spec) {
  if (spec.numel() == 0) return "(nothing: padding only)";
  std::string s = "[";
  for (int d = 0; d < spec.rank(); ++d) {
    const int64_t begin = spec.offsets()[static_cast<size_t>(d)];
    s += (d ? ", " : "") + std::to_string(begin) + ":" +
         std::to_string(begin + spec.lengths()[static_cast<size_t>(d)]);
  }
  return s + "]";
}

// Which layers each virtual stage holds, and the schedule with its theoretical bubble.
std::string describe_stages(const PipelineLayout& pipeline, bool tied) {
  const parallel::PpScheduleShape& shape = pipeline.schedule;
  const size_t stages = pipeline.stages.size();
  std::ostringstream out;
  out << "# pipeline: " << stages << " virtual stage(s), stage s on pp rank s % pp as its chunk "
         "s / pp\n";
  for (size_t s = 0; s < stages; ++s) {
    const parallel::StageLayers& l = pipeline.stages[s];
    out << "stage " << s << " (pp rank " << s % static_cast<size_t>(shape.pp) << ", chunk "
        << s / static_cast<size_t>(shape.pp) << "): layers " << l.first << ".."
        << l.first + l.count - 1;
    if (s == 0) out << " + the embedding";
    if (s + 1 == stages) {
      out << " + the final norm, " << (tied ? "the tied embedding's copy as lm_head" : "lm_head")
          << " and the loss";
    }
    out << "\n";
  }
  Result<std::string> schedule = parallel::describe_pp_schedule(shape);
  if (schedule.ok()) out << *schedule;
  return out.str();
}

}  // namespace

RankMemoryPlan rank_memory_plan(int64_t local_elements, int dp, bool zero) {
  const double weights = static_cast<double>(local_elements) * 4.0 / (1024.0 * 1024.0);
  return {weights, weights, zero ? 3.0 * weights / dp : 2.0 * weights};
}

Result<std::string> describe_layout(const config::RunConfig& config, int world_size) {
  MS_ASSIGN_OR_RETURN(const int dp, data_parallel_size(config, world_size));
  const int tp = static_cast<int>(config.parallel.tp);
  const config::ModelConfig& m = config.model;
  MS_RETURN_IF_ERROR(parallel::check_tp_model(
      {m.n_heads, m.n_kv_heads, m.d_ff, m.moe.shared_expert_d_ff}, tp));
  MS_ASSIGN_OR_RETURN(const PipelineLayout pipeline, check_pipeline(config, dp));
  const int pp = pipeline.schedule.pp;
  const int cp = static_cast<int>(config.parallel.cp);
  const comm::MeshShape shape{.pp = pp, .dp = dp, .tp = tp, .ep = 1,
                              .loaders = static_cast<int>(config.parallel.loaders), .cp = cp};
  MS_ASSIGN_OR_RETURN(const comm::MeshLayout mesh, comm::MeshLayout::create(shape, world_size));
  MS_ASSIGN_OR_RETURN(const std::vector<model::ParameterSpec> specs, model::parameter_specs(m));

  std::ostringstream out;
  out << "# layout on " << world_size << " rank(s): ";
  if (pp > 1) out << "pp " << pp << " x ";
  out << "dp " << dp << (cp > 1 ? " x cp " + std::to_string(cp) : "") << " x tp " << tp;
  if (shape.loaders > 0) out << " + " << shape.loaders << " loader rank(s)";
  const std::string dp_term = cp > 1 ? "(dp_rank * cp + cp_rank)" : "dp_rank";
  out << (pp > 1 ? "\n# rank = (pp_rank * dp + " + dp_term + ") * tp + tp_rank"
                 : "\n# rank = " + dp_term + " * tp + tp_rank")
      << " (tp varies fastest); loader ranks come last\n";
  for (int r = 0; r < world_size; ++r) {
    const comm::MeshCoord c = mesh.coord(r);
    if (c.loader) {
      out << "rank " << r << ": loader\n";
    } else {
      out << "rank " << r << ": " << (pp > 1 ? "pp " + std::to_string(c.pp) + ", " : "") << "dp "
          << c.dp << (cp > 1 ? ", cp " + std::to_string(c.cp) : "") << ", tp " << c.tp << "\n";
    }
  }
  if (pp > 1) out << describe_stages(pipeline, config.model.tie_embeddings);
  const bool sp = tp > 1 && config.parallel.sequence_parallel;
  out << "# sequence parallel " << (sp ? "on" : "off") << ", tp overlap "
      << (tp > 1 && config.parallel.tp_overlap ? "on" : "off") << ", recompute "
      << config::enum_to_name(config.parallel.recompute) << ", zero " << config.parallel.zero << "\n";
  if (tp > 1) {
    out << "# the vocabulary (" << m.vocab_size << ") is split as if padded to "
        << parallel::padded_vocab(m.vocab_size, tp) << "; padded ids are not stored\n";
  }
  out << "# tensor [global shape] [stage(s) with pp] split: slice of tp rank 0 | 1 | ... (every dp rank holds its "
         "tp rank's slice";
  out << (config.parallel.zero == 1 ? "; ZeRO-1 splits its optimizer state over dp)\n" : ")\n");
  int64_t local_elements = 0;
  const config::ParallelConfig& par = config.parallel;
  for (const model::ParameterSpec& p : specs) {
    const parallel::TpSplit split = parallel::tp_split_of(p.name);
    bool on_rank0 = true;  // held by pipeline rank 0, whose memory the summary gives
    out << p.name << " " << shape_string(p.global_shape) << " ";
    if (pp > 1) {
      MS_ASSIGN_OR_RETURN(const std::vector<int> stages,
                          parallel::pp_stages_holding(p.name, m.n_layers, m.tie_embeddings, pp,
                                                      static_cast<int>(par.vpp), par.pp_layers));
      out << "stage";
      for (size_t i = 0; i < stages.size(); ++i) out << (i ? "," : " ") << stages[i];
      out << " ";
      on_rank0 = std::any_of(stages.begin(), stages.end(), [&](int s) { return s % pp == 0; });
    }
    out << (tp == 1 ? "whole" : parallel::tp_split_name(split)) << ":";
    for (int r = 0; r < tp; ++r) {
      MS_ASSIGN_OR_RETURN(const comm::ShardSpec s, parallel::tp_shard(p.name, p.global_shape, tp, r));
      if (r == 0 && on_rank0) local_elements += s.numel();
      out << (r ? " |" : "") << " " << box_string(s);
    }
    out << "\n";
  }
  // ZeRO-1 shards over dp x cp (every cp rank holds its dp rank's tensors).
  const RankMemoryPlan mem = rank_memory_plan(local_elements, dp * cp, config.parallel.zero == 1);
  char line[240];
  std::snprintf(line, sizeof(line),
                "# per model rank (%s): weights %.1f MiB, gradients %.1f MiB, optimizer "
                "state %.1f MiB\n",
                pp > 1 ? "pp rank 0, tp rank 0" : "tp rank 0", mem.weights_mib,
                mem.gradients_mib, mem.optimizer_mib);
  out << line;
  return out.str();
}

}  // namespace ms::train
