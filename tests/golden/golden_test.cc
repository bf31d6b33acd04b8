// The golden test: ms::model::Transformer and ms::train::Optimizer against an independent PyTorch
// implementation (tests/golden/model/generate.py, written from docs/model.md, run in float64).
// For every committed case the model is created from the case's config, the exported weights are
// copied in by name, and the test requires:
//   - step-0 cross-entropy loss (and MoE aux loss) within 1e-5 relative,
//   - logits and every parameter gradient within 1e-4, in the sense max |ours - ref| <=
//     1e-4 * max |ref| per tensor,
//   - a 10-step AdamW loss curve on the same batch (loss before each update) within 1e-4
//     relative per step.
// CI never runs Python: it reads the committed outputs (docs/golden.md explains regeneration).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "golden/golden_case.h"
#include "io/atomic_file.h"
#include "model/transformer.h"
#include "train/optimizer.h"

namespace ms::golden {
namespace {

constexpr double kLossRelTol = 1e-5;
constexpr double kTensorTol = 1e-4;
constexpr double kCurveRelTol = 1e-4;

std::string case_dir(const std::string& name) {
  const char* root = std::getenv("MS_SOURCE_DIR");
  return std::string(root ? root : ".") + "/tests/golden/model/" + name;
}

// Copies every tensor of `weights` into the parameter of the same name. Refuses (naming the
// tensor and the file) a name the model does not have, a parameter the file lacks, and a dtype
// or shape that differs from the parameter's.
Status load_weights(model::Transformer& transformer, const ckpt::SafetensorsFile& weights) {
  std::set<std::string> loaded;
  for (const ckpt::SafetensorsEntry& entry : weights.tensors()) {
    Result<size_t> index = transformer.parameter_index(entry.name);
    if (!index.ok()) {
      return InvalidArgument(weights.path() + ": tensor '" + entry.name +
                             "' is not a parameter of the model");
    }
    model::Parameter& p = transformer.parameters()[*index];
    if (entry.dtype != DType::kF32 || entry.shape != p.global_shape) {
      return InvalidArgument(weights.path() + ": tensor '" + entry.name + "' is " +
                             std::string(ckpt::safetensors_dtype_name(entry.dtype)) +
                             shape_string(entry.shape) + ", the parameter is F32" +
                             shape_string(p.global_shape));
    }
    MS_ASSIGN_OR_RETURN(Tensor value, weights.read(entry.name));
    std::copy_n(value.data<float>(), value.numel(), p.value.data<float>());
    loaded.insert(entry.name);
  }
  for (const model::Parameter& p : transformer.parameters()) {
    if (!loaded.contains(p.name)) {
      return NotFound(weights.path() + ": parameter '" + p.name + "' is missing");
    }
  }
  return Status::OK();
}

// max |ours - ref| / max |ref| over the elements of one tensor; infinity when either side holds
// a NaN or an infinity (std::max would silently skip a NaN).
double scaled_max_error(std::span<const float> ours, std::span<const float> ref) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ours[i]) || !std::isfinite(ref[i])) return INFINITY;
    max_diff = std::max(max_diff, std::abs(static_cast<double>(ours[i]) - ref[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[i])));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

double relative_error(double ours, double ref) {
  return ref != 0 ? std::abs(ours - ref) / std::abs(ref) : std::abs(ours);
}

// One committed case loaded: its config, the model holding the exported weights, the batch and
// the PyTorch outputs.
class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = case_dir(GetParam());
    Result<std::string> text = io::read_file(dir + "/case.json");
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    case_json_ = *text;
    Result<GoldenCase> parsed = case_from_json(case_json_, dir + "/case.json");
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    case_ = *parsed;
    Result<std::unique_ptr<model::Transformer>> created =
        model::Transformer::create(case_.model, case_.seed);
    ASSERT_TRUE(created.ok()) << created.status().to_string();
    model_ = std::move(*created);
    Result<ckpt::SafetensorsFile> weights =
        ckpt::SafetensorsFile::open(dir + "/weights.safetensors");
    ASSERT_TRUE(weights.ok()) << weights.status().to_string();
    const Status loaded = load_weights(*model_, *weights);
    ASSERT_TRUE(loaded.ok()) << loaded.to_string();
    ASSERT_NO_FATAL_FAILURE(load_batch(dir + "/batch.safetensors"));
    Result<ckpt::SafetensorsFile> golden =
        ckpt::SafetensorsFile::open(dir + "/golden.safetensors");
    ASSERT_TRUE(golden.ok()) << golden.status().to_string();
    golden_ = std::make_unique<ckpt::SafetensorsFile>(std::move(*golden));
  }

  void load_batch(const std::string& path) {
    Result<ckpt::SafetensorsFile> file = ckpt::SafetensorsFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    for (auto [name, out] : {std::pair{"inputs", &inputs_}, std::pair{"targets", &targets_}}) {
      Result<Tensor> t = file->read(name);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      ASSERT_EQ(t->dtype(), DType::kI32) << path << ": " << name;
      ASSERT_EQ(t->shape(), (std::vector<int64_t>{case_.batch, case_.seq_len})) << path;
      out->assign(t->data<int32_t>(), t->data<int32_t>() + t->numel());
    }
  }

  // The golden tensor `name` as floats, with its expected element count checked.
  std::vector<float> golden(const std::string& name, int64_t numel) {
    Result<Tensor> t = golden_->read(name);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return std::vector<float>(static_cast<size_t>(numel), NAN);
    EXPECT_EQ(t->numel(), numel) << golden_->path() << ": " << name;
    std::vector<float> values(t->data<float>(), t->data<float>() + t->numel());
    values.resize(static_cast<size_t>(numel), NAN);
    return values;
  }

  model::LossStats forward_backward() {
    Result<model::LossStats> stats = model_->forward_backward(
        inputs_.data(), targets_.data(), case_.batch, case_.seq_len, 1.0f);
    EXPECT_TRUE(stats.ok()) << stats.status().to_string();
    return stats.ok() ? *stats : model::LossStats{NAN, NAN, 0, 0};
  }

  std::string case_json_;
  GoldenCase case_;
  std::unique_ptr<model::Transformer> model_;
  std::vector<int32_t> inputs_, targets_;
  std::unique_ptr<ckpt::SafetensorsFile> golden_;
};

TEST_P(GoldenTest, CommittedCaseMatchesTheExportTool) {
  const std::vector<GoldenCase> cases = golden_cases();
  auto it = std::find_if(cases.begin(), cases.end(),
                         [&](const GoldenCase& c) { return c.name == GetParam(); });
  ASSERT_NE(it, cases.end());
  EXPECT_EQ(case_.seed, it->seed);
  EXPECT_EQ(case_.batch, it->batch);
  EXPECT_EQ(case_.seq_len, it->seq_len);
  EXPECT_EQ(case_.steps, it->steps);
  EXPECT_TRUE(case_.model == it->model) << "case.json is stale: rerun ms_golden_export";
  EXPECT_TRUE(case_.optim == it->optim) << "case.json is stale: rerun ms_golden_export";
  const GoldenBatch batch = make_batch(case_);
  EXPECT_EQ(inputs_, batch.inputs);
  EXPECT_EQ(targets_, batch.targets);

  Result<std::vector<std::string>> excluded = no_weight_decay_from_json(case_json_, GetParam());
  ASSERT_TRUE(excluded.ok()) << excluded.status().to_string();
  std::vector<std::string> ours;
  for (const model::Parameter& p : model_->parameters()) {
    if (!p.weight_decay) ours.push_back(p.name);
  }
  EXPECT_EQ(*excluded, ours) << "weight-decay exclusions differ from the generator's groups";
}

TEST_P(GoldenTest, LogitsMatchPyTorch) {
  Result<Tensor> logits = model_->forward_logits(inputs_.data(), case_.batch, case_.seq_len);
  ASSERT_TRUE(logits.ok()) << logits.status().to_string();
  const std::vector<float> ref = golden("logits", logits->numel());
  EXPECT_LE(scaled_max_error(logits->span<float>(), ref), kTensorTol);
}

TEST_P(GoldenTest, StepZeroLossAndEveryGradientMatchPyTorch) {
  const model::LossStats stats = forward_backward();
  const float ref_loss = golden("loss", 1)[0];
  const float ref_aux = golden("aux_loss", 1)[0];
  EXPECT_LE(relative_error(stats.loss, ref_loss), kLossRelTol)
      << "ours " << stats.loss << " PyTorch " << ref_loss;
  EXPECT_LE(relative_error(stats.aux_loss, ref_aux), kLossRelTol)
      << "ours " << stats.aux_loss << " PyTorch " << ref_aux;
  for (const model::Parameter& p : model_->parameters()) {
    const std::vector<float> ref = golden("grad." + p.name, p.grad.numel());
    EXPECT_LE(scaled_max_error(p.grad.span<float>(), ref), kTensorTol) << p.name;
  }
}

TEST_P(GoldenTest, TenStepAdamWCurveMatchesPyTorch) {
  std::vector<model::Parameter>& params = model_->parameters();
  std::vector<train::OptimSegment> segments;
  int64_t numel = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    segments.push_back({i, numel, params[i].value.numel(), params[i].weight_decay});
    numel += params[i].value.numel();
  }
  std::vector<float> values(static_cast<size_t>(numel)), grads(static_cast<size_t>(numel));
  for (const train::OptimSegment& s : segments) {
    std::copy_n(params[s.param].value.data<float>(), s.length, values.data() + s.offset);
  }
  Result<std::unique_ptr<train::Optimizer>> optimizer =
      train::Optimizer::create(case_.optim, numel, params.size());
  ASSERT_TRUE(optimizer.ok()) << optimizer.status().to_string();
  const train::PartialSumReducer identity = [](std::span<double>) { return Status::OK(); };

  const std::vector<float> ref = golden("curve", case_.steps);
  const std::vector<float> ref_aux = golden("curve_aux", case_.steps);
  for (int64_t step = 0; step < case_.steps; ++step) {
    model_->zero_grads();
    const model::LossStats stats = forward_backward();
    EXPECT_LE(relative_error(stats.loss, ref[step]), kCurveRelTol)
        << "step " << step << ": ours " << stats.loss << " PyTorch " << ref[step];
    EXPECT_LE(relative_error(stats.aux_loss, ref_aux[step]), kCurveRelTol)
        << "step " << step << ": aux ours " << stats.aux_loss << " PyTorch " << ref_aux[step];
    for (const train::OptimSegment& s : segments) {
      std::copy_n(params[s.param].grad.data<float>(), s.length, grads.data() + s.offset);
    }
    ASSERT_TRUE((*optimizer)->step(values, grads, segments, {case_.optim.lr, 1.0}, identity).ok());
    for (const train::OptimSegment& s : segments) {
      std::copy_n(values.data() + s.offset, s.length, params[s.param].value.data<float>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenTest, ::testing::Values("dense", "moe", "parallel"),
                         [](const auto& info) { return info.param; });

// The weight loader refuses files that do not describe exactly the model's parameters.
class WeightLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<model::Transformer>> created =
        model::Transformer::create(golden_cases()[0].model, 1);
    ASSERT_TRUE(created.ok()) << created.status().to_string();
    model_ = std::move(*created);
    dir_ = std::filesystem::temp_directory_path() /
           ("ms_golden_loader_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes the model's parameters, minus `skip`, plus `extra`, and loads them back.
  Status roundtrip(const std::string& skip, const Tensor* extra) {
    std::vector<ckpt::NamedTensor> tensors;
    for (const model::Parameter& p : model_->parameters()) {
      if (p.name != skip) tensors.push_back({p.name, &p.value});
    }
    if (extra != nullptr) tensors.push_back({"model.layers.9.extra.weight", extra});
    const std::string path = (dir_ / "weights.safetensors").string();
    MS_RETURN_IF_ERROR(ckpt::write_safetensors(path, tensors));
    MS_ASSIGN_OR_RETURN(ckpt::SafetensorsFile file, ckpt::SafetensorsFile::open(path));
    return load_weights(*model_, file);
  }

  std::unique_ptr<model::Transformer> model_;
  std::filesystem::path dir_;
};

TEST_F(WeightLoaderTest, AcceptsExactlyTheModelsParameters) {
  EXPECT_TRUE(roundtrip("", nullptr).ok());
}

TEST_F(WeightLoaderTest, RefusesAMissingParameterByName) {
  const Status status = roundtrip("model.norm.weight", nullptr);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_NE(status.to_string().find("model.norm.weight"), std::string::npos) << status.to_string();
}

TEST_F(WeightLoaderTest, RefusesAnExtraTensorByName) {
  const Tensor extra = Tensor::zeros(DType::kF32, {4});
  const Status status = roundtrip("", &extra);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.to_string().find("model.layers.9.extra.weight"), std::string::npos);
}

TEST_F(WeightLoaderTest, RefusesAShapeThatDiffersFromTheParameter) {
  const Tensor wrong = Tensor::zeros(DType::kF32, {3, 3});
  std::vector<ckpt::NamedTensor> tensors;
  for (const model::Parameter& p : model_->parameters()) {
    tensors.push_back({p.name, p.name == "model.norm.weight" ? &wrong : &p.value});
  }
  const std::string path = (dir_ / "shape.safetensors").string();
  ASSERT_TRUE(ckpt::write_safetensors(path, tensors).ok());
  Result<ckpt::SafetensorsFile> file = ckpt::SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const Status status = load_weights(*model_, *file);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.to_string().find("[3, 3]"), std::string::npos) << status.to_string();
}

}  // namespace
}  // namespace ms::golden
