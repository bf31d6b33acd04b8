// The golden cases shared by the export tool (ms_golden_export) and the golden test: each case is
// a tiny model configuration, a seed, a batch shape and the AdamW hyper-parameters of the
// 10-step loss curve. The export tool writes a case to tests/golden/model/<case>/case.json,
// where the PyTorch generator (tests/golden/model/generate.py) reads it; the test reads the same
// committed file back, so the golden outputs are always compared under the configuration they
// were generated with, and separately checks that it still equals the definition here (a stale
// golden directory is reported rather than silently tested).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"

namespace ms::golden {

struct GoldenCase {
  std::string name;  // directory name under tests/golden/model/
  uint64_t seed = 0;  // parameter initialization and batch tokens
  int64_t batch = 2;  // B
  int64_t seq_len = 8;  // T
  int64_t steps = 10;  // AdamW updates in the loss curve
  config::ModelConfig model;
  config::OptimConfig optim;  // AdamW, constant lr, no clipping
};

// The committed cases, in a fixed order: "dense", "moe", "parallel".
std::vector<GoldenCase> golden_cases();

// case.json text: the case plus `no_weight_decay`, the parameter names the model excludes from
// weight decay (the generator builds its AdamW parameter groups from it).
std::string case_to_json(const GoldenCase& golden_case,
                         const std::vector<std::string>& no_weight_decay);

// Parses case.json text. InvalidArgument naming `source` and the missing or mistyped key.
Result<GoldenCase> case_from_json(const std::string& text, const std::string& source);
// The `no_weight_decay` list of case.json text.
Result<std::vector<std::string>> no_weight_decay_from_json(const std::string& text,
                                                           const std::string& source);

// The case's batch, row-major (B, T): row b is tokens s[0..T) and targets s[1..T] of a random
// sequence s of T+1 tokens drawn from Philox keyed by (seed, stream_id("golden.batch")).
struct GoldenBatch {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};
GoldenBatch make_batch(const GoldenCase& golden_case);

}  // namespace ms::golden
