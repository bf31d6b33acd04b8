// `ms-ckpt diff A B`: per-tensor max absolute and max relative difference between two
// checkpoints, or a checkpoint and safetensors (lib/ckpt/diff.h). Exit status: 0 when every
// tensor is present on both sides and equal within --atol/--rtol (bitwise by default), 3 when
// any differs, 1 for an error reading either side, 2 for a usage error.
#include "cmd/common/registry.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "ckpt/diff.h"
#include "data/progress.h"

namespace ms::ckpt_cmd {
namespace {

constexpr int kExitDiffers = 3;

struct DiffArgs {
  std::string a, b;
  double atol = 0, rtol = 0;
  bool json = false;
  bool all = false;
};

const char* kind_name(ckpt::TensorDiffKind kind) {
  switch (kind) {
    case ckpt::TensorDiffKind::kCompared: return "compared";
    case ckpt::TensorDiffKind::kOnlyInA: return "only_in_a";
    case ckpt::TensorDiffKind::kOnlyInB: return "only_in_b";
    case ckpt::TensorDiffKind::kShapeMismatch: return "shape_mismatch";
  }
  return "compared";
}

void print_text(const std::vector<ckpt::TensorDiff>& diffs, bool all) {
  std::printf("%-60s %-8s %12s %12s %10s\n", "tensor", "result", "max_abs", "max_rel",
              "mismatched");
  for (const ckpt::TensorDiff& d : diffs) {
    if (d.equal && !all) continue;
    const char* result = d.kind != ckpt::TensorDiffKind::kCompared ? kind_name(d.kind)
                         : d.equal                                 ? "equal"
                                                                   : "DIFFERS";
    std::printf("%-60s %-8s %12.4g %12.4g %10lld %s\n", d.name.c_str(), result, d.max_abs,
                d.max_rel, static_cast<long long>(d.mismatched), d.detail.c_str());
  }
}

nlohmann::ordered_json to_json(const std::vector<ckpt::TensorDiff>& diffs) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ckpt::TensorDiff& d : diffs) {
    out.push_back({{"name", d.name}, {"result", kind_name(d.kind)}, {"equal", d.equal},
                   {"max_abs", d.max_abs}, {"max_rel", d.max_rel}, {"mismatched", d.mismatched},
                   {"detail", d.detail}});
  }
  return out;
}

Result<int> run_diff(const DiffArgs& args) {
  io::Env& env = io::default_env();
  MS_ASSIGN_OR_RETURN(ckpt::OpenedCatalog a, ckpt::open_tensor_catalog(args.a, env));
  MS_ASSIGN_OR_RETURN(ckpt::OpenedCatalog b, ckpt::open_tensor_catalog(args.b, env));
  ckpt::DiffOptions options;
  options.atol = args.atol;
  options.rtol = args.rtol;
  options.parameters_only = !a.is_checkpoint || !b.is_checkpoint;
  data::Progress progress("diff", a.catalog.tensors.size(), {.unit = "tensors"});
  options.progress = [&](size_t done, size_t) { progress.update(done); };
  MS_ASSIGN_OR_RETURN(std::vector<ckpt::TensorDiff> diffs,
                      ckpt::diff_catalogs(a.catalog, b.catalog, options));
  progress.finish();
  size_t differing = 0;
  double max_abs = 0, max_rel = 0;
  for (const ckpt::TensorDiff& d : diffs) {
    differing += d.equal ? 0 : 1;
    max_abs = std::max(max_abs, d.max_abs);
    max_rel = std::max(max_rel, d.max_rel);
  }
  if (args.json) {
    nlohmann::ordered_json doc = {{"a", a.resolved}, {"b", b.resolved}, {"atol", args.atol},
                                  {"rtol", args.rtol}, {"tensors", diffs.size()},
                                  {"differing", differing}, {"max_abs", max_abs},
                                  {"max_rel", max_rel}, {"diffs", to_json(diffs)}};
    std::cout << doc.dump(2) << std::endl;
  } else {
    print_text(diffs, args.all);
    std::printf("# %s vs %s: %zu tensors, %zu differ (atol %g, rtol %g); max_abs %.4g, "
                "max_rel %.4g\n", a.resolved.c_str(), b.resolved.c_str(), diffs.size(),
                differing, args.atol, args.rtol, max_abs, max_rel);
  }
  return differing == 0 ? 0 : kExitDiffers;
}

void add_diff_command(cli::Tool& tool) {
  auto args = std::make_shared<DiffArgs>();
  CLI::App* sub = tool.add_subcommand(
      "diff", "Per-tensor max abs/rel difference of two checkpoints or a checkpoint and "
              "safetensors (exit 0 equal, 3 different)",
      [args] { return run_diff(*args); });
  sub->add_option("a", args->a, "Checkpoint, or safetensors file/directory")->required();
  sub->add_option("b", args->b, "Checkpoint, or safetensors file/directory")->required();
  sub->add_option("--atol", args->atol, "Absolute tolerance: equal when |a-b| <= atol + rtol*|b|")
      ->check(cli::kNonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--rtol", args->rtol, "Relative tolerance")
      ->check(cli::kNonNegativeNumber)
      ->capture_default_str();
  sub->add_flag("--all", args->all, "List equal tensors too");
  cli::add_json_flag(sub, &args->json);
}

}  // namespace

MS_CLI_COMMAND(diff, add_diff_command);

}  // namespace ms::ckpt_cmd
