// A small token dataset and plan for trainer tests, written through lib/data the way
// `ms-data build` and `ms-data plan` write them: documents follow a deterministic rule
// (t[i+1] = (3 t[i] + 1) mod vocab), so a tiny model's loss falls quickly, and the vocabulary
// is small so a training step takes milliseconds.
#pragma once

#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "config/run_config.h"
#include "core/status.h"

namespace ms::train::testing {

struct SyntheticPlanOptions {
  int64_t vocab_size = 96;   // recorded as the dataset tokenizer's vocabulary
  int64_t seq_len = 16;
  int64_t train_samples = 256;
  int64_t documents = 120;
};

// Writes <dir>/synthetic.{bin,idx,meta.json} and <dir>/synthetic.plan and returns the plan's
// path. `dir` must exist.
Result<std::string> write_synthetic_plan(const std::string& dir,
                                         const SyntheticPlanOptions& options = {});

// Rank 0 of `world` creates a fresh directory from `tmpl` (a mkdtemp pattern ending in
// XXXXXX) and writes the synthetic plan into it; every rank gets the directory's path.
Result<std::string> make_shared_plan_dir(comm::Communicator& world, const std::string& tmpl);

// The tiny dense run the trainer and resume tests train: 2 layers of d_model 32 over
// `dir`/synthetic.plan, global batch 8 of 16 tokens, 5 steps, several gradient buckets, in
// run directory `dir`/`name`. Tests change what they exercise.
config::RunConfig tiny_run_config(const std::string& dir, const std::string& name, int64_t zero);

}  // namespace ms::train::testing
