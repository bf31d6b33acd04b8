// `ms-ckpt verify`: checks a checkpoint's structure (manifest.json validates, every data file a
// shard names exists and is long enough) and every shard's crc32c against the stored bytes,
// reporting each problem with the file, the tensor and the byte offset rather than stopping at
// the first, so one run tells the whole extent of the damage.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace ms::ckpt {

struct VerifyReport {
  std::string step_dir;
  size_t tensors = 0;
  size_t shards = 0;
  uint64_t bytes = 0;                 // stored bytes checked
  std::vector<std::string> problems;  // "rank-00001.data offset 4096: tensor 'x' ...: ..."
  bool ok() const { return problems.empty(); }
};

// Verifies the checkpoint `path` names (step directory, checkpoints/ directory or latest file).
// Returns an error when the manifest itself cannot be read or is malformed (naming the file and
// key); damaged data is reported in VerifyReport::problems. `progress` gets bytes done/total.
Result<VerifyReport> verify_checkpoint(
    const std::string& path, io::Env& env,
    const std::function<void(uint64_t done, uint64_t total)>& progress = {});

}  // namespace ms::ckpt
