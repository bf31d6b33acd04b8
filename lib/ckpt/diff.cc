// Tensor-by-tensor comparison of checkpoints and safetensors (see diff.h).
#include "ckpt/diff.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_import.h"

namespace ms::ckpt {
namespace {

// Elements [begin, begin + out.size()) of `t` as doubles, whatever its dtype.
void to_doubles(const Tensor& t, size_t begin, std::span<double> out) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>() + begin;
    for (size_t i = 0; i < out.size(); ++i) {
      if constexpr (std::is_same_v<T, bf16>) {
        out[i] = static_cast<double>(bf16_to_float(p[i].bits));
      } else if constexpr (std::is_same_v<T, f16>) {
        out[i] = static_cast<double>(f16_to_float(p[i].bits));
      } else {
        out[i] = static_cast<double>(p[i]);
      }
    }
  });
}

void compare_element(double x, double y, double atol, double rtol, TensorDiff& d) {
  if (std::isnan(x) && std::isnan(y)) return;
  const double diff = (std::isnan(x) || std::isnan(y)) ? INFINITY
                      : x == y                         ? 0.0
                                                       : std::fabs(x - y);
  const double scale = std::max(std::fabs(x), std::fabs(y));
  d.max_abs = std::max(d.max_abs, diff);
  if (diff > 0) d.max_rel = std::max(d.max_rel, scale > 0 ? diff / scale : INFINITY);
  if (!(diff <= atol + rtol * std::fabs(y))) ++d.mismatched;
}

TensorDiff missing(const std::string& name, TensorDiffKind kind) {
  TensorDiff d;
  d.name = name;
  d.kind = kind;
  d.equal = false;
  return d;
}

bool skipped(const std::string& name, const DiffOptions& options) {
  return options.parameters_only && name.starts_with("optimizer.");
}

}  // namespace

TensorCatalog checkpoint_catalog(const std::string& step_dir,
                                 std::shared_ptr<const Manifest> manifest, io::Env& env) {
  TensorCatalog catalog;
  for (const TensorRecord& t : manifest->tensors) {
    catalog.tensors.push_back(TensorInfo{t.name, t.dtype, t.global_shape});
  }
  catalog.read = [step_dir, manifest, &env](const std::string& name) -> Result<Tensor> {
    const TensorRecord* t = manifest->find(name);
    if (t == nullptr) return NotFound(step_dir + ": the checkpoint has no tensor '" + name + "'");
    // The manifest's shape sizes the buffer only once real file bytes back it.
    MS_RETURN_IF_ERROR(check_tensor_files(step_dir, *t, env));
    MS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor(t->dtype, t->global_shape,
                                                    step_dir + ": tensor '" + name + "'"));
    const std::vector<int64_t> zeros(t->global_shape.size(), 0);
    MS_RETURN_IF_ERROR(
        read_region(step_dir, *manifest, name, zeros, t->global_shape, out.raw_data(), env));
    return out;
  };
  return catalog;
}

Result<OpenedCatalog> open_tensor_catalog(const std::string& path, io::Env& env) {
  OpenedCatalog opened;
  Result<std::string> step_dir = resolve_checkpoint(path, env);
  if (step_dir.ok()) {
    MS_ASSIGN_OR_RETURN(Manifest m, Manifest::read(*step_dir, env));
    opened.manifest = std::make_shared<const Manifest>(std::move(m));
    opened.catalog = checkpoint_catalog(*step_dir, opened.manifest, env);
    opened.is_checkpoint = true;
    opened.resolved = *step_dir;
    return opened;
  }
  Result<TensorCatalog> st = open_safetensors_catalog(path, env);
  if (!st.ok()) {
    return NotFound("'" + path + "' is neither a checkpoint (" + step_dir.status().message() +
                    ") nor safetensors (" + st.status().message() + ")");
  }
  opened.catalog = std::move(*st);
  opened.resolved = path;
  return opened;
}

TensorDiff diff_tensors(const std::string& name, const Tensor& a, const Tensor& b, double atol,
                        double rtol) {
  TensorDiff d;
  d.name = name;
  if (a.shape() != b.shape()) {
    d.kind = TensorDiffKind::kShapeMismatch;
    d.detail = a.describe() + " vs " + b.describe();
    d.equal = false;
    return d;
  }
  // Compared in fixed chunks: widening whole tensors to f64 would need up to 8x their bytes.
  constexpr size_t kChunk = 4096;
  std::array<double, kChunk> x, y;
  const size_t n = static_cast<size_t>(a.numel());
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const size_t count = std::min(kChunk, n - begin);
    to_doubles(a, begin, std::span(x).first(count));
    to_doubles(b, begin, std::span(y).first(count));
    for (size_t i = 0; i < count; ++i) compare_element(x[i], y[i], atol, rtol, d);
  }
  d.equal = d.mismatched == 0;
  return d;
}

Result<std::vector<TensorDiff>> diff_catalogs(const TensorCatalog& a, const TensorCatalog& b,
                                              const DiffOptions& options) {
  std::vector<TensorDiff> out;
  const size_t total = a.tensors.size();
  for (size_t i = 0; i < total; ++i) {
    const std::string& name = a.tensors[i].name;
    if (skipped(name, options)) continue;
    if (b.find(name) == nullptr) {
      out.push_back(missing(name, TensorDiffKind::kOnlyInA));
      continue;
    }
    MS_ASSIGN_OR_RETURN(Tensor ta, a.read(name));
    MS_ASSIGN_OR_RETURN(Tensor tb, b.read(name));
    out.push_back(diff_tensors(name, ta, tb, options.atol, options.rtol));
    if (options.progress) options.progress(i + 1, total);
  }
  for (const TensorInfo& t : b.tensors) {
    if (!skipped(t.name, options) && a.find(t.name) == nullptr) {
      out.push_back(missing(t.name, TensorDiffKind::kOnlyInB));
    }
  }
  return out;
}

}  // namespace ms::ckpt
