// Serving from a training checkpoint: every rank saves a different block of rows of each
// parameter (a tensor-parallel-style layout the server never used) with the run config and tokenizer, and
// load_checkpoint_model reassembles the model on each rank with identical weights and logits.
// A checkpoint lacking a tensor the config needs is refused naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "comm/mpi_communicator.h"
#include "infer/model_loader.h"

namespace ms::infer {
namespace {

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
  return run;
}

std::string gpt2_tokenizer() {
  const char* src = std::getenv("MS_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/data/tokenizers/gpt2/tokenizer.json";
}

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
  void TearDown() override {
    ASSERT_TRUE(world_->barrier().ok());
    if (world_->rank() == 0) fs::remove_all(dir_);
  }

  // Rank r saves rows [r R / size, (r + 1) R / size) of every parameter except `skip`.
  void save(const std::string& skip) {
    std::vector<ckpt::SaveTensor> tensors;
    const int r = world_->rank(), size = world_->size();
    for (const model::Parameter& p : model_->parameters()) {
      if (p.name == skip) continue;
      const int64_t rows = p.global_shape[0], row_elems = p.value.numel() / rows;
      const int64_t first = rows * r / size, count = rows * (r + 1) / size - first;
      comm::Shape offsets(p.global_shape.size(), 0), lengths = p.global_shape;
      offsets[0] = first;
      lengths[0] = count;
      Result<comm::ShardSpec> spec = comm::ShardSpec::box(p.global_shape, offsets, lengths);
      ASSERT_TRUE(spec.ok());
      tensors.push_back({p.name, DType::kF32, *spec, p.value.data<float>() + first * row_elems,
                         size == 1});
    }
    ckpt::SaveRequest req;
    req.checkpoints_dir = dir_;
    req.step = 5;
    req.layout = {size, size, 1, 1, 1, 1};
    req.config_yaml = config::dump_yaml(tiny_run());
    req.tokenizer_path = gpt2_tokenizer();
    req.async = false;
    ckpt::Checkpointer saver(*world_);
    Status s = saver.save(tensors, req);
    ASSERT_TRUE(s.ok()) << s.message();
  }

  std::unique_ptr<comm::MpiCommunicator> world_;
  std::string dir_;
  std::unique_ptr<model::Transformer> model_;
};

TEST_F(CheckpointLoad, ReassemblesTheModelFromAnyLayout) {
  save("");
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

TEST_F(CheckpointLoad, MissingTensorIsRefusedByName) {
  save("model.norm.weight");
  Result<LoadedModel> loaded = load_checkpoint_model(dir_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("no tensor model.norm.weight"), std::string::npos)
      << loaded.status().message();
}

}  // namespace
}  // namespace ms::infer
