// The run-config checks that need more than the config file: the actual world size (mpirun -np)
// and the data plan. The config loader (lib/config) already refused everything decidable from
// the file alone; these run before the model is built or any batch is read, and each message
// names the key and the rule.
#pragma once

#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"
#include "parallel/pp_schedule.h"
#include "parallel/pp_stages.h"

namespace ms::train {

// The data-parallel size a job of `world_size` ranks runs with, after checking the layout this
// trainer supports: parallel.ep must be 1 (expert parallelism is not in this trainer yet),
// world_size must be at least 1, the parallel.loaders loader ranks must leave at least one
// trainer, pp * tp must divide the trainers, train.global_batch must be divisible by dp *
// train.micro_batch with dp = (world_size - parallel.loaders) / (pp * tp), with sequence
// parallelism tp must divide train.micro_batch * train.seq_len, and check_pipeline must pass.
// InvalidArgument naming the key otherwise.
Result<int> data_parallel_size(const config::RunConfig& config, int world_size);

// The pipeline a config describes at data-parallel size `dp`: its schedule (pp, vpp, the
// micro-batches per step, parallel.schedule) and the layers of every virtual stage
// (parallel/pp_stages.h). Without pipeline parallelism one stage of every layer.
// InvalidArgument naming the keys when the schedule does not fit (interleaved needs vpp >= 2
// and micro-batches a multiple of pp, the others vpp = 1) or the layers do not split.
struct PipelineLayout {
  parallel::PpScheduleShape schedule;
  std::vector<parallel::StageLayers> stages;  // by virtual stage
};
Result<PipelineLayout> check_pipeline(const config::RunConfig& config, int dp);

// What the trainer learns from the plan's loader.
struct DataFacts {
  std::string plan_path;
  int64_t seq_len = 0;
  int64_t vocab_size = 0;  // the dataset tokenizer's vocabulary; 0 when unknown
};

// train.seq_len must equal the plan's sequence length and fit model.max_seq_len; the model's
// vocabulary must cover the tokenizer's. InvalidArgument naming the keys and the plan.
Status check_against_data(const config::RunConfig& config, const DataFacts& data);

// data.plan must be set and name an existing file. InvalidArgument / NotFound otherwise.
Status check_plan_path(const config::RunConfig& config);

}  // namespace ms::train
