// Serving from a training checkpoint of a layout the server never used: every rank saves a
// different block of rows of each parameter (as a row-split, tensor-parallel-style run would)
// with the run config and the tokenizer, and load_checkpoint_model, called on each rank alone,
// reassembles whole tensors across the shards into a model with the saved weights (F32 exactly,
// BF16 rounded once). A checkpoint lacking a tensor the config needs, or without the run config
// saying which model it holds, is refused with the name of what is missing. A checkpoint also
// serves as the draft of speculative decoding (load_draft_for_serving, under every rank, or on
// the attention rank only when disaggregated).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "ckpt/checkpoint.h"
#include "comm/mpi_communicator.h"
#include "infer/model_loader.h"
#include "infer/serving.h"
#include "ops/cast.h"
#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

using testing::gpt2_tokenizer;

namespace fs = std::filesystem;

config::RunConfig tiny_run() {
  config::RunConfig run;
  run.model.vocab_size = 50304;
  run.model.d_model = 16;
  run.model.n_layers = 2;
  run.model.n_heads = 2;
  run.model.n_kv_heads = 1;
  run.model.d_ff = 24;
  run.model.max_seq_len = 32;
  run.model.moe.num_experts = 2;
  run.model.moe.top_k = 1;
  run.train.seq_len = 16;  // the run config is validated whole: seq_len <= max_seq_len
  return run;
}

struct SaveOptions {
  std::string skip;  // a parameter left out of the checkpoint
  DType dtype = DType::kF32;
  bool with_config = true;
};

class CheckpointLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = comm::MpiCommunicator::world("infer-test");
    ASSERT_TRUE(world.ok());
    world_ = std::move(world).value();
    char path[256] = {};
    if (world_->rank() == 0) {
      const std::string p =
          (fs::temp_directory_path() / ("ms-infer-ckpt-" + std::to_string(getpid()))).string();
      std::snprintf(path, sizeof(path), "%s", p.c_str());
    }
    ASSERT_TRUE(world_->broadcast(path, sizeof(path), DType::kU8, 0).ok());
    dir_ = path;
    Result<std::unique_ptr<model::Transformer>> m = model::Transformer::create(tiny_run().model, 9);
    ASSERT_TRUE(m.ok());
    model_ = std::move(*m);
  }
  // Every rank has loaded before rank 0 removes the directory, and the next test saves only
  // after it is gone.
  void TearDown() override {
    ASSERT_TRUE(world_->barrier().ok());
    if (world_->rank() == 0) fs::remove_all(dir_);
    ASSERT_TRUE(world_->barrier().ok());
  }

  // Rank r saves rows [r R / size, (r + 1) R / size) of every parameter (but o.skip) as
  // o.dtype, at step 5 of a world-size layout.
  void save(const SaveOptions& o) {
    std::vector<ckpt::SaveTensor> tensors;
    const int r = world_->rank(), size = world_->size();
    staged_.clear();
    staged_.reserve(model_->parameters().size());
    for (const model::Parameter& p : model_->parameters()) {
      if (p.name == o.skip) continue;
      const int64_t rows = p.global_shape[0], row_elems = p.value.numel() / rows;
      const int64_t first = rows * r / size, count = rows * (r + 1) / size - first;
      comm::Shape offsets(p.global_shape.size(), 0), lengths = p.global_shape;
      offsets[0] = first;
      lengths[0] = count;
      Result<comm::ShardSpec> spec = comm::ShardSpec::box(p.global_shape, offsets, lengths);
      ASSERT_TRUE(spec.ok()) << spec.status().message();
      const float* rows_f32 = p.value.data<float>() + first * row_elems;
      const void* data = rows_f32;
      if (o.dtype == DType::kBF16) {
        staged_.emplace_back(static_cast<size_t>(count * row_elems));
        ops::f32_to_bf16(rows_f32, staged_.back().data(), staged_.back().size());
        data = staged_.back().data();
      }
      tensors.push_back({p.name, o.dtype, *spec, data, size == 1});
    }
    ckpt::SaveRequest req;
    req.checkpoints_dir = dir_;
    req.step = 5;
    req.layout = {size, size, 1, 1, 1, 1};
    if (o.with_config) req.config_yaml = config::dump_yaml(tiny_run());
    req.tokenizer_path = gpt2_tokenizer();
    req.async = false;
    ckpt::Checkpointer saver(*world_);
    Status s = saver.save(tensors, req);
    ASSERT_TRUE(s.ok()) << s.message();
  }

  std::unique_ptr<comm::MpiCommunicator> world_;
  std::string dir_;
  std::unique_ptr<model::Transformer> model_;
  std::vector<std::vector<bf16>> staged_;  // BF16 copies the save reads from
};

TEST_F(CheckpointLoad, ReassemblesTheModelFromAnyLayout) {
  save({});
  Result<LoadedModel> loaded = load_checkpoint_model(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->model->config(), model_->config());
  const auto& want = model_->parameters();
  const auto& got = loaded->model->parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(std::equal(want[i].value.span<float>().begin(), want[i].value.span<float>().end(),
                           got[i].value.span<float>().begin()))
        << want[i].name;
  }
  EXPECT_FALSE(loaded->tokenizer->encode("hello world").empty());
}

TEST_F(CheckpointLoad, Bf16WeightsAreWidenedToTheirRoundedValues) {
  SaveOptions bf16_weights;
  bf16_weights.dtype = DType::kBF16;
  save(bf16_weights);
  Result<LoadedModel> loaded = load_checkpoint_model(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const auto& want = model_->parameters();
  const auto& got = loaded->model->parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const std::span<const float> w = want[i].value.span<float>(), g = got[i].value.span<float>();
    size_t wrong = 0;
    for (size_t k = 0; k < w.size(); ++k) {
      wrong += g[k] != bf16_to_float(float_to_bf16(w[k]));
    }
    EXPECT_EQ(wrong, 0u) << want[i].name;
  }
}

TEST_F(CheckpointLoad, MissingTensorIsRefusedByName) {
  SaveOptions without_norm;
  without_norm.skip = "model.norm.weight";
  save(without_norm);
  Result<LoadedModel> loaded = load_checkpoint_model(dir_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("no tensor model.norm.weight"), std::string::npos)
      << loaded.status().message();
}

TEST_F(CheckpointLoad, CheckpointWithoutRunConfigIsRefused) {
  SaveOptions without_config;
  without_config.with_config = false;
  save(without_config);
  Result<LoadedModel> loaded = load_checkpoint_model(dir_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("config_yaml is empty"), std::string::npos)
      << loaded.status().message();
}

// --draft-model takes a checkpoint as --checkpoint does: the checkpoint as the draft of its own
// model gives the target-alone greedy tokens with every proposal accepted, summed over ranks.
TEST_F(CheckpointLoad, ACheckpointServesAsTheDraft) {
  save({});
  ServeOptions options;
  options.engine.kv_blocks = 64;
  options.engine.draft_tokens = 3;
  Result<LoadedModel> target = load_for_serving("", dir_, options, *world_);
  ASSERT_TRUE(target.ok()) << target.status().message();
  options.draft_model = dir_;
  Result<LoadedModel> draft = load_draft_for_serving(options, *target, *world_);
  ASSERT_TRUE(draft.ok()) << draft.status().message();
  std::vector<Request> requests;
  for (int i = 0; i < 4; ++i) {
    Request r;
    r.id = std::to_string(i);
    r.prompt = target->tokenizer->encode(i % 2 == 0 ? "To be, or not" : "ROMEO:");
    r.max_tokens = 6 + i;
    requests.push_back(r);
  }
  Result<ServeResult> alone = serve(*target, requests, options, *world_);
  Result<ServeResult> spec = serve(*target, requests, options, *world_, {}, &*draft);
  ASSERT_TRUE(alone.ok() && spec.ok());
  // Disaggregated, the draft is loaded whole by the attention rank only.
  ServeOptions disaggregated = options;
  disaggregated.attention_ranks = 1;
  Result<LoadedModel> beside = load_draft_for_serving(disaggregated, *target, *world_);
  ASSERT_TRUE(beside.ok()) << beside.status().message();
  EXPECT_EQ(beside->model != nullptr, world_->rank() == 0);
  if (world_->rank() != 0) return;
  int64_t proposed = 0, accepted = 0;
  for (const RankReport& r : spec->ranks) {
    proposed += r.draft_proposed;
    accepted += r.draft_accepted;
  }
  EXPECT_GT(proposed, 0);
  EXPECT_EQ(accepted, proposed);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(spec->completions[i].tokens, alone->completions[i].tokens) << i;
  }
  EXPECT_NE(describe_speculation(*spec, 3).find("acceptance 1.000"), std::string::npos);
}

}  // namespace
}  // namespace ms::infer
