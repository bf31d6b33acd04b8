// ms_golden_export: writes the inputs of the PyTorch golden generator for every golden case
// (golden_case.h). For case <c> it fills <out>/<c>/ with
//   case.json            the model and AdamW settings, and the names excluded from weight decay,
//   weights.safetensors  every parameter of ms::model::Transformer under its Hugging Face name,
//   batch.safetensors    "inputs" and "targets", I32 (B, T).
// The weights start from Transformer::create(model, seed) and are then moved away from the
// initialization's near-uniform regime, so that the comparison exercises attention, routing and
// the norm weights rather than a model whose every output is nearly the same: matrices are
// multiplied by kMatrixScale and norm weights become 1 + kNormJitter * normal(Philox stream
// "golden.norm.<name>"). Usage: ms_golden_export <out-dir> [case ...] (all cases by default).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "core/philox.h"
#include "golden/golden_case.h"
#include "io/atomic_file.h"
#include "model/transformer.h"

namespace ms::golden {
namespace {

constexpr float kMatrixScale = 10.0f;
constexpr float kNormJitter = 0.2f;

void move_off_initialization(model::Transformer& transformer, uint64_t seed) {
  for (model::Parameter& p : transformer.parameters()) {
    std::span<float> w = p.value.span<float>();
    if (p.weight_decay) {
      for (float& x : w) x *= kMatrixScale;
    } else {
      fill_normal(w, seed, stream_id("golden.norm." + p.name), 0, 1.0f, kNormJitter);
    }
  }
}

Status write_weights(const model::Transformer& transformer, const std::string& path) {
  std::vector<ckpt::NamedTensor> tensors;
  for (const model::Parameter& p : transformer.parameters()) tensors.push_back({p.name, &p.value});
  return ckpt::write_safetensors(path, tensors);
}

Status write_batch(const GoldenCase& c, const std::string& path) {
  GoldenBatch batch = make_batch(c);
  const Tensor inputs = Tensor::view_of(DType::kI32, {c.batch, c.seq_len}, batch.inputs.data());
  const Tensor targets = Tensor::view_of(DType::kI32, {c.batch, c.seq_len}, batch.targets.data());
  const std::vector<ckpt::NamedTensor> tensors = {{"inputs", &inputs}, {"targets", &targets}};
  return ckpt::write_safetensors(path, tensors);
}

Status export_case(const GoldenCase& c, const std::string& out_root) {
  const std::string dir = out_root + "/" + c.name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IOError("cannot create " + dir + ": " + ec.message());
  MS_ASSIGN_OR_RETURN(std::unique_ptr<model::Transformer> transformer,
                      model::Transformer::create(c.model, c.seed));
  move_off_initialization(*transformer, c.seed);
  std::vector<std::string> no_weight_decay;
  for (const model::Parameter& p : transformer->parameters()) {
    if (!p.weight_decay) no_weight_decay.push_back(p.name);
  }
  MS_RETURN_IF_ERROR(io::write_file_atomic(dir + "/case.json", case_to_json(c, no_weight_decay)));
  MS_RETURN_IF_ERROR(write_weights(*transformer, dir + "/weights.safetensors"));
  MS_RETURN_IF_ERROR(write_batch(c, dir + "/batch.safetensors"));
  std::printf("%s: %zu parameters, %lld elements -> %s\n", c.name.c_str(),
              transformer->parameters().size(),
              static_cast<long long>(transformer->parameter_count()), dir.c_str());
  return Status::OK();
}

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: %s <out-dir> [case ...]   (cases: dense moe parallel)\n",
                 argv[0]);
    return 2;
  }
  const std::vector<std::string> wanted(argv + 2, argv + argc);
  std::vector<GoldenCase> selected;
  for (const GoldenCase& c : golden_cases()) {
    if (wanted.empty() || std::find(wanted.begin(), wanted.end(), c.name) != wanted.end()) {
      selected.push_back(c);
    }
  }
  if (selected.size() != (wanted.empty() ? golden_cases().size() : wanted.size())) {
    std::fprintf(stderr, "unknown case name (cases: dense moe parallel)\n");
    return 2;
  }
  for (const GoldenCase& c : selected) {
    const Status status = export_case(c, argv[1]);
    if (!status.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(), status.to_string().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace ms::golden

int main(int argc, char** argv) { return ms::golden::run(argc, argv); }
