// Checks of a run config against the world size and the data; see run_checks.h.
#include "train/run_checks.h"

#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <utility>

namespace ms::train {
namespace {

std::string key_value(const char* key, int64_t value) {
  return std::string(key) + " (" + std::to_string(value) + ")";
}

}  // namespace

Result<int> data_parallel_size(const config::RunConfig& config, int world_size) {
  if (world_size < 1) return InvalidArgument("world size must be at least 1");
  const int64_t loaders = config.parallel.loaders;
  if (loaders < 0 || loaders >= world_size) {
    return InvalidArgument(key_value("parallel.loaders", loaders) +
                           " must leave at least one trainer rank: the job has " +
                           std::to_string(world_size) + " rank(s); run with more ranks (mpirun -np " +
                           std::to_string(loaders + 1) + " or more) or fewer loaders");
  }
  const int trainers = world_size - static_cast<int>(loaders);
  const int64_t tp = config.parallel.tp, pp = config.parallel.pp, cp = config.parallel.cp;
  if (cp > 1 && loaders > 0) {
    return InvalidArgument(key_value("parallel.cp", cp) + " does not work with " +
                           key_value("parallel.loaders", loaders) +
                           " yet: every cp rank reads its dp rank's batches locally; set "
                           "parallel.loaders=0");
  }
  if (tp < 1 || pp < 1 || cp < 1 || trainers % (tp * pp * cp) != 0) {
    // The sizes that are not 1 (tp always), named as in the config: "parallel.tp (3)" or
    // "parallel.pp * parallel.tp = 2 * 2".
    std::string keys, values, names;
    const std::pair<const char*, int64_t> sizes[] = {{"pp", pp}, {"cp", cp}, {"tp", tp}};
    for (const auto& [key, value] : sizes) {
      if (value == 1 && std::string(key) != "tp") continue;
      const std::string sep = keys.empty() ? "" : " * ";
      keys += sep + "parallel." + key;
      values += sep + std::to_string(value);
      names += sep + key;
    }
    const int64_t group = std::max<int64_t>(1, tp * pp * cp);
    const std::string model =
        pp * cp == 1 ? key_value("parallel.tp", tp) : keys + " = " + values;
    if (pp * cp > 1) names = "(" + names + ")";
    return InvalidArgument(model + " must divide the " + std::to_string(trainers) +
                           " trainer rank(s) (" + std::to_string(world_size) +
                           " minus parallel.loaders " + std::to_string(loaders) +
                           "): dp = trainers / " + names + "; run with mpirun -np " +
                           std::to_string(group * std::max<int64_t>(1, trainers / group) + loaders));
  }
  const int dp = trainers / static_cast<int>(tp * pp * cp);
  const int64_t per_step = int64_t{dp} * config.train.micro_batch;
  if (config.train.global_batch % per_step != 0) {
    return InvalidArgument(key_value("train.global_batch", config.train.global_batch) +
                           " must be divisible by data-parallel size * train.micro_batch = " +
                           std::to_string(dp) + " * " +
                           std::to_string(config.train.micro_batch) + " = " +
                           std::to_string(per_step) + " (dp is the number of trainer ranks, " +
                           std::to_string(world_size) + " minus parallel.loaders " +
                           std::to_string(loaders) +
                           (tp * pp * cp > 1 ? ", divided by parallel.pp * parallel.cp * "
                                                   "parallel.tp " + std::to_string(pp * cp * tp)
                                             : "") +
                           ")");
  }
  const int64_t tokens = config.train.micro_batch * config.train.seq_len / cp;
  if (tp > 1 && config.parallel.sequence_parallel && tokens % tp != 0) {
    return InvalidArgument("parallel.sequence_parallel splits each micro-batch's tokens "
                           "(train.micro_batch * train.seq_len / parallel.cp = " +
                           std::to_string(tokens) + ") evenly over " +
                           key_value("parallel.tp", tp) +
                           ", which must divide them; or set parallel.sequence_parallel=false");
  }
  const int64_t ep = config.parallel.ep;
  if (ep < 1 || (dp * cp) % ep != 0) {
    return InvalidArgument(key_value("parallel.ep", ep) + " must divide the data-parallel size " +
                           (cp > 1 ? "x parallel.cp " + std::to_string(dp * cp)
                                   : std::to_string(dp)) +
                           " (expert parallelism is carved out of dp x cp: the " +
                           std::to_string(trainers) + " trainer rank(s) / (pp * tp))");
  }
  if (cp > 1 && config.model.moe.capacity_factor > 0) {
    return InvalidArgument("model.moe.capacity_factor caps each expert per micro-batch, which " +
                           key_value("parallel.cp", cp) +
                           " spreads over its ranks; the kept tokens would depend on the "
                           "layout. Use a dropless MoE (capacity_factor 0) with cp");
  }
  const int64_t experts = config.model.moe.num_experts;
  if (ep > 1 && (experts == 0 || experts % ep != 0)) {
    return InvalidArgument(key_value("model.moe.num_experts", experts) +
                           " must be a positive multiple of " + key_value("parallel.ep", ep) +
                           ": each ep rank holds the same number of experts");
  }
  MS_RETURN_IF_ERROR(check_pipeline(config, dp).status());
  return dp;
}

Result<PipelineLayout> check_pipeline(const config::RunConfig& config, int dp) {
  const config::ParallelConfig& p = config.parallel;
  PipelineLayout layout;
  MS_ASSIGN_OR_RETURN(const parallel::PpScheduleKind kind,
                      parallel::parse_pp_schedule(p.schedule));
  const int64_t per_step = int64_t{dp} * config.train.micro_batch;
  const int64_t micro_batches = per_step > 0 ? config.train.global_batch / per_step : 0;
  layout.schedule = {static_cast<int>(p.pp), static_cast<int>(p.vpp),
                     static_cast<int>(micro_batches), kind};
  if (p.pp == 1 && p.vpp == 1 && p.pp_layers.empty()) {
    layout.schedule.kind = parallel::PpScheduleKind::k1F1B;
    layout.stages = {{0, config.model.n_layers}};
    return layout;
  }
  Status shape = parallel::check_pp_schedule(layout.schedule);
  if (!shape.ok()) {
    return InvalidArgument("parallel.schedule " + p.schedule + " with parallel.pp " +
                           std::to_string(p.pp) + ", parallel.vpp " + std::to_string(p.vpp) +
                           " and " + std::to_string(micro_batches) +
                           " micro-batches per step (train.global_batch / (dp * "
                           "train.micro_batch)): " + shape.message());
  }
  MS_ASSIGN_OR_RETURN(layout.stages,
                      parallel::pp_stage_layers(config.model.n_layers, static_cast<int>(p.pp),
                                                static_cast<int>(p.vpp), p.pp_layers));
  return layout;
}

Status check_against_data(const config::RunConfig& config, const DataFacts& data) {
  if (config.train.seq_len != data.seq_len) {
    return InvalidArgument(key_value("train.seq_len", config.train.seq_len) +
                           " must equal the sequence length of the plan " + data.plan_path +
                           " (" + std::to_string(data.seq_len) +
                           "); rebuild the plan or set train.seq_len=" +
                           std::to_string(data.seq_len));
  }
  if (data.seq_len > config.model.max_seq_len) {
    return InvalidArgument("the plan's sequence length (" + std::to_string(data.seq_len) +
                           ") exceeds " + key_value("model.max_seq_len", config.model.max_seq_len));
  }
  if (data.vocab_size > config.model.vocab_size) {
    return InvalidArgument(key_value("model.vocab_size", config.model.vocab_size) +
                           " is smaller than the vocabulary of the dataset's tokenizer (" +
                           std::to_string(data.vocab_size) + ", plan " + data.plan_path +
                           "): token ids would fall outside the embedding; set "
                           "model.vocab_size to at least " + std::to_string(data.vocab_size));
  }
  return Status::OK();
}

Status check_plan_path(const config::RunConfig& config) {
  if (config.data.plan.empty()) {
    return InvalidArgument("data.plan is not set: build a plan with `ms-data plan` and pass "
                           "--set data.plan=<file>");
  }
  struct stat st;
  if (::stat(config.data.plan.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return NotFound("data.plan: no plan file at " + config.data.plan +
                    " (build one with `ms-data plan`)");
  }
  return Status::OK();
}

}  // namespace ms::train
