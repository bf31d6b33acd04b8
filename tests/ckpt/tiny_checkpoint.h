// A tiny Llama model's parameters saved through the real save path by every rank of an MPI test
// (tests/ckpt): the model config, deterministic values, and a fixture whose temporary directory
// is shared by the ranks.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_names.h"
#include "comm/mpi_communicator.h"
#include "config/run_config.h"

namespace ms::ckpt::test_support {

inline config::ModelConfig tiny_model(int64_t n_layers = 1) {
  config::ModelConfig c;
  c.vocab_size = 16;
  c.d_model = 8;
  c.n_layers = n_layers;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 12;
  c.max_seq_len = 16;
  return c;
}

// tiny_model with its feed-forward blocks made MoE: 4 routed experts (top 2) and a shared
// expert, as a Mixtral-style checkpoint names them (hf_names.h).
inline config::ModelConfig tiny_moe_model(int64_t n_layers = 1) {
  config::ModelConfig c = tiny_model(n_layers);
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.shared_expert_d_ff = 4;
  return c;
}

// Every parameter of `model`, in hf_parameter_specs order, filled with
// 0.01 * (7 t + i mod 13) + offset (t: the parameter's index, i: the element's).
inline std::vector<Tensor> tiny_values(float offset,
                                       const config::ModelConfig& model = tiny_model()) {
  std::vector<Tensor> out;
  int t = 0;
  for (const TensorInfo& info : hf_parameter_specs(model)) {
    Tensor x = Tensor::empty(DType::kF32, info.shape);
    float* p = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      p[i] = 0.01f * static_cast<float>(t * 7 + i % 13) + offset;
    }
    out.push_back(std::move(x));
    ++t;
  }
  return out;
}

class TinyCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = comm::MpiCommunicator::world().value();
    char path[256] = {0};
    if (world_->rank() == 0) {
      char tmpl[] = "/tmp/ms_ckpt_test_XXXXXX";
      ASSERT_NE(mkdtemp(tmpl), nullptr);
      std::snprintf(path, sizeof(path), "%s", tmpl);
    }
    ASSERT_TRUE(world_->broadcast(path, sizeof(path), DType::kU8, 0).ok());
    dir_ = path;
  }
  void TearDown() override {
    ASSERT_TRUE(world_->barrier().ok());
    if (world_->rank() == 0) std::filesystem::remove_all(dir_);
  }

  // Saves `v` (one tensor per hf_parameter_specs(model_) entry) as step `step` under
  // dir_/name, the embedding split by rows across the ranks and the rest replicated, plus a
  // moment of lm_head (and of layer 0's expert 0 w1 in an MoE model) as the trainer saves
  // optimizer state; copies `tokenizer_path` in when it is not empty. Returns the step
  // directory.
  std::string save(const std::string& name, int64_t step, const std::vector<Tensor>& v,
                   const std::string& tokenizer_path = "") {
    const std::vector<TensorInfo> specs = hf_parameter_specs(model_);
    std::vector<SaveTensor> tensors;
    for (size_t i = 0; i < specs.size(); ++i) {
      comm::ShardSpec spec = comm::ShardSpec::replicated(specs[i].shape);
      const float* data = v[i].data<float>();
      if (i == 0) {
        spec = *comm::ShardSpec::split(specs[i].shape, 0, world_->size(), world_->rank());
        data += spec.offsets()[0] * specs[i].shape[1];
      }
      tensors.push_back({specs[i].name, DType::kF32, spec, data});
      if (specs[i].name == kFirstExpert) {
        tensors.push_back({"optimizer.exp_avg." + specs[i].name, DType::kF32, spec, data});
      }
    }
    tensors.push_back({"optimizer.exp_avg.lm_head.weight", DType::kF32,
                       comm::ShardSpec::replicated(specs.back().shape), v.back().data<float>()});
    config::RunConfig run;
    run.model = model_;
    run.train.seq_len = model_.max_seq_len;
    SaveRequest request;
    request.checkpoints_dir = dir_ + "/" + name;
    request.step = step;
    request.config_yaml = config::dump_yaml(run);
    request.tokenizer_path = tokenizer_path;
    request.async = false;
    request.layout.world = request.layout.dp = world_->size();
    Checkpointer checkpointer(*world_);
    EXPECT_TRUE(checkpointer.save(tensors, request).ok());
    EXPECT_TRUE(checkpointer.finish().ok());
    return request.checkpoints_dir + "/" + step_dir_name(step);
  }

  static constexpr const char* kFirstExpert = "model.layers.0.block_sparse_moe.experts.0.w1.weight";

  std::unique_ptr<comm::MpiCommunicator> world_;
  std::string dir_;
  config::ModelConfig model_ = tiny_model();  // what save() saves; a test may deepen it
};

}  // namespace ms::ckpt::test_support
