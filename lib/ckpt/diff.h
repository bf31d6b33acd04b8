// Comparing checkpoints tensor by tensor (`ms-ckpt diff`), and the catalogs both sides are read
// through: a checkpoint (any of the forms resolve_checkpoint accepts) or safetensors (a file or
// a Hugging Face directory). Tensors are read one pair at a time, so memory holds two tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/hf_names.h"
#include "ckpt/manifest.h"
#include "core/status.h"
#include "io/env.h"

namespace ms::ckpt {

// A checkpoint step directory as a catalog: each read assembles the whole global tensor with
// read_region (every shard's crc32c checked).
TensorCatalog checkpoint_catalog(const std::string& step_dir,
                                 std::shared_ptr<const Manifest> manifest, io::Env& env);

struct OpenedCatalog {
  TensorCatalog catalog;
  bool is_checkpoint = false;
  std::string resolved;                        // the step directory, or the safetensors path
  std::shared_ptr<const Manifest> manifest;    // set for a checkpoint
};

// A checkpoint when `path` resolves to one (it or it/manifest.json, a checkpoints/ directory,
// a latest file), otherwise safetensors. NotFound when it is neither.
Result<OpenedCatalog> open_tensor_catalog(const std::string& path, io::Env& env);

enum class TensorDiffKind { kCompared, kOnlyInA, kOnlyInB, kShapeMismatch };

struct TensorDiff {
  std::string name;
  TensorDiffKind kind = TensorDiffKind::kCompared;
  std::string detail;        // shapes or dtypes for a mismatch
  double max_abs = 0;        // max |a - b|
  double max_rel = 0;        // max |a - b| / max(|a|, |b|) over elements where that is > 0
  int64_t mismatched = 0;    // elements with |a - b| > atol + rtol * |b|
  bool equal = true;         // within tolerance (and present on both sides, same shape)
};

struct DiffOptions {
  double atol = 0;  // the defaults demand bitwise-equal values (NaN equals NaN)
  double rtol = 0;
  // Skip tensors named "optimizer.*" (set when one side is safetensors, which has none).
  bool parameters_only = false;
  std::function<void(size_t done, size_t total)> progress;
};

// Compares every tensor of `a` with the tensor of the same name in `b`, in a's order, then lists
// b's extra tensors. Values are compared as f64, so dtypes may differ (bf16 against f32).
// Errors only for unreadable data, naming the file and tensor.
Result<std::vector<TensorDiff>> diff_catalogs(const TensorCatalog& a, const TensorCatalog& b,
                                              const DiffOptions& options);

// The per-element statistics of two same-shape tensors of any dtypes.
TensorDiff diff_tensors(const std::string& name, const Tensor& a, const Tensor& b,
                        double atol, double rtol);

}  // namespace ms::ckpt
