// Tensor-parallel checkpoints through the real save path: each of 2 ranks is a tp rank and
// saves its slice of every parameter and of its Adam moment as parallel::tp_shard places it
// (q/k/v/gate/up split by rows, o/down by columns, the vocabulary by rows, norms replicated),
// as the trainer will. The checkpoint reads back whole through the catalog that inspect,
// diff, export and ms-infer use; it reshards between every pair of the layouts below without
// changing a value; and its safetensors export is byte-for-byte the export of its tp=1 reshard.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "ckpt/diff.h"
#include "ckpt/hf_export.h"
#include "ckpt/regions.h"
#include "ckpt/reshard_offline.h"
#include "ckpt/verify.h"
#include "parallel/tp_shards.h"
#include "tests/ckpt/tiny_checkpoint.h"

namespace ms::ckpt {
namespace {

namespace fs = std::filesystem;

// tp_model() with a key/value head per tp rank, so the recorded run config (parallel.tp=2)
// passes its own rule that tp divides model.n_kv_heads.
config::ModelConfig tp_model() {
  config::ModelConfig c = test_support::tiny_model();
  c.n_kv_heads = 2;
  return c;
}

// Every parameter of tp_model(), in hf_parameter_specs order: 0.01 * (7 t + i mod 13) + offset.
std::vector<Tensor> tp_values(float offset) {
  std::vector<Tensor> out;
  int t = 0;
  for (const TensorInfo& info : hf_parameter_specs(tp_model())) {
    Tensor x = Tensor::empty(DType::kF32, info.shape);
    for (int64_t i = 0; i < x.numel(); ++i) {
      x.data<float>()[i] = 0.01f * static_cast<float>(t * 7 + i % 13) + offset;
    }
    out.push_back(std::move(x));
    ++t;
  }
  return out;
}

class TpCheckpointTest : public test_support::TinyCheckpointTest {
 protected:
  // Saves tp_values(0) as the parameters and tp_values(0.5) as their exp_avg moments,
  // each rank its tp slice (world = tp). Returns the step directory.
  std::string save_tp(const std::string& name) {
    const int tp = world_->size();
    const std::vector<TensorInfo> specs = hf_parameter_specs(tp_model());
    const std::vector<Tensor> weights = tp_values(0), moments = tp_values(0.5f);
    std::vector<std::vector<float>> slices;
    slices.reserve(2 * specs.size());
    std::vector<SaveTensor> tensors;
    for (size_t i = 0; i < specs.size(); ++i) {
      const comm::ShardSpec spec =
          parallel::tp_shard(specs[i].name, specs[i].shape, tp, world_->rank()).value();
      slices.push_back(slice_of(weights[i], spec));
      tensors.push_back({specs[i].name, DType::kF32, spec, slices.back().data()});
      slices.push_back(slice_of(moments[i], spec));
      tensors.push_back({"optimizer.exp_avg." + specs[i].name, DType::kF32, spec,
                         slices.back().data()});
    }
    config::RunConfig run;
    run.model = tp_model();
    run.train.seq_len = tp_model().max_seq_len;
    run.parallel.tp = tp;
    SaveRequest request;
    request.checkpoints_dir = dir_ + "/" + name;
    request.step = 4;
    request.config_yaml = config::dump_yaml(run);
    request.async = false;
    request.layout.world = request.layout.tp = tp;
    Checkpointer checkpointer(*world_);
    EXPECT_TRUE(checkpointer.save(tensors, request).ok());
    EXPECT_TRUE(checkpointer.finish().ok());
    return request.checkpoints_dir + "/" + step_dir_name(request.step);
  }

  // The elements of `global` that the whole-box `spec` selects, row-major.
  static std::vector<float> slice_of(const Tensor& global, const comm::ShardSpec& spec) {
    const Box whole{std::vector<int64_t>(global.shape().size(), 0), global.shape()};
    const Box box{spec.offsets(), spec.lengths()};
    std::vector<float> out(static_cast<size_t>(spec.numel()));
    const auto* src = static_cast<const std::byte*>(global.raw_data());
    EXPECT_TRUE(copy_region(box, whole, std::span(src, global.nbytes()), box,
                            std::as_writable_bytes(std::span(out)), sizeof(float))
                    .ok());
    return out;
  }

  Result<std::string> reshard(const std::string& from, const std::string& to,
                              const std::string& target) {
    ReshardOptions options;
    options.output_dir = dir_ + "/" + to;
    MS_ASSIGN_OR_RETURN(options.target, parse_reshard_target(target));
    options.tp_placement = parallel::tp_shard;
    options.max_shard_bytes = 96;
    return reshard_checkpoint(from, options, *world_, io::default_env());
  }

  // Every tensor of `a` equals its namesake in `b`, and both hold the same tensors.
  static void expect_same_values(const std::string& a, const std::string& b) {
    Result<OpenedCatalog> ca = open_tensor_catalog(a, io::default_env());
    Result<OpenedCatalog> cb = open_tensor_catalog(b, io::default_env());
    ASSERT_TRUE(ca.ok() && cb.ok());
    Result<std::vector<TensorDiff>> d = diff_catalogs(ca->catalog, cb->catalog, {});
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(d->size(), ca->catalog.tensors.size());
    for (const TensorDiff& t : *d) EXPECT_TRUE(t.equal) << a << " vs " << b << ": " << t.name;
  }

  static std::string file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
};

TEST_F(TpCheckpointTest, SavedTpBoxesReadBackAsTheGlobalTensors) {
  if (world_->size() != 2) GTEST_SKIP() << "saves with tp = 2 ranks";
  const std::string step = save_tp("src");
  if (world_->rank() != 0) return;
  Result<Manifest> m = Manifest::read(step);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->layout.tp, 2);
  EXPECT_EQ(m->find("model.layers.0.self_attn.o_proj.weight")->shards.size(), 2u);
  EXPECT_EQ(m->find("optimizer.exp_avg.model.layers.0.mlp.up_proj.weight")->shards.size(), 2u);
  EXPECT_EQ(m->find("model.norm.weight")->shards.size(), 1u);
  Result<VerifyReport> v = verify_checkpoint(step, io::default_env());
  ASSERT_TRUE(v.ok() && v->ok());
  Result<OpenedCatalog> c = open_tensor_catalog(step, io::default_env());
  ASSERT_TRUE(c.ok());
  const std::vector<TensorInfo> specs = hf_parameter_specs(tp_model());
  const std::vector<Tensor> want = tp_values(0);
  for (size_t i = 0; i < specs.size(); ++i) {
    Result<Tensor> got = c->catalog.read(specs[i].name);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(diff_tensors(specs[i].name, *got, want[i], 0, 0).mismatched, 0) << specs[i].name;
  }
}

TEST_F(TpCheckpointTest, ReshardsBetweenEveryPairOfLayoutsKeepEveryValue) {
  if (world_->size() != 2) GTEST_SKIP() << "saves with tp = 2 ranks";
  const std::string source = save_tp("src");
  const std::vector<std::string> layouts = {"dp=1,tp=1", "tp=2", "dp=2", "tp=2,dp=2,zero=1",
                                            "tp=4", "tp=2,zero=1"};
  std::vector<std::string> direct;
  for (size_t i = 0; i < layouts.size(); ++i) {
    Result<std::string> out = reshard(source, "l" + std::to_string(i), layouts[i]);
    ASSERT_TRUE(out.ok()) << layouts[i] << ": " << out.status().to_string();
    direct.push_back(*out);
    if (world_->rank() != 0) continue;
    const ReshardTarget t = parse_reshard_target(layouts[i]).value();
    EXPECT_EQ(Manifest::read(*out)->layout, (Layout{t.world(), t.dp, t.tp, 1, 1, t.zero}));
  }
  for (size_t i = 0; i < layouts.size(); ++i) {
    for (size_t j = 0; j < layouts.size(); ++j) {
      if (i == j) continue;
      const std::string name = "p" + std::to_string(i) + std::to_string(j);
      Result<std::string> out = reshard(direct[i], name, layouts[j]);
      ASSERT_TRUE(out.ok()) << layouts[i] << " -> " << layouts[j] << ": "
                            << out.status().to_string();
      if (world_->rank() == 0) expect_same_values(source, *out);
    }
  }
}

TEST_F(TpCheckpointTest, ExportOfATpCheckpointEqualsExportOfItsTp1Reshard) {
  if (world_->size() != 2) GTEST_SKIP() << "saves with tp = 2 ranks";
  const std::string source = save_tp("src");
  Result<std::string> tp1 = reshard(source, "tp1", "tp=1");
  ASSERT_TRUE(tp1.ok()) << tp1.status().to_string();
  if (world_->rank() != 0) return;
  for (const auto& [step, out] : {std::pair{source, "hf_tp2"}, std::pair{*tp1, "hf_tp1"}}) {
    Result<OpenedCatalog> c = open_tensor_catalog(step, io::default_env());
    ASSERT_TRUE(c.ok());
    HfExportOptions o;
    o.output_dir = dir_ + "/" + out;
    o.max_shard_bytes = 1024;  // several files and an index
    Result<HfExportSummary> s =
        export_hf(checkpoint_model_config(c->manifest->config_yaml, step).value(), c->catalog, o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
  }
  size_t files = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_ + "/hf_tp2")) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(file_bytes(e.path().string()), file_bytes(dir_ + "/hf_tp1/" + name)) << name;
    ++files;
  }
  EXPECT_GT(files, 2u);
}

TEST_F(TpCheckpointTest, ARuleErrorIsRefusedBeforeAnythingIsWritten) {
  if (world_->size() != 2) GTEST_SKIP() << "saves with tp = 2 ranks";
  const std::string source = save_tp("src");
  Result<std::string> out = reshard(source, "bad", "tp=3");  // 8 query rows, d_ff 12
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("tp=3: tensor \""), std::string::npos)
      << out.status().message();
  ASSERT_TRUE(world_->barrier().ok());
  EXPECT_FALSE(fs::exists(dir_ + "/bad"));
}

}  // namespace
}  // namespace ms::ckpt
