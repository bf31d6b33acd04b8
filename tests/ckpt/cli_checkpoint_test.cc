// The ms-ckpt command library on checkpoints written by the real save path on 2 ranks (one
// tensor split between them, the rest replicated): verify passes an intact checkpoint and names
// the file, tensor and offset of a flipped byte; diff reports exact max abs/rel differences on
// crafted tensors; export of a checkpoint to safetensors diffs equal against it; a reshard to
// pp=2,tp=2 puts each stage's tensors in its ranks' files and, resharded back to dp=1, diffs
// equal against the original; so does a reshard of an MoE checkpoint to ep=2,dp=2, which puts
// each ep rank's experts in its file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "ckpt/checkpoint.h"
#include "ckpt/diff.h"
#include "ckpt/hf_export.h"
#include "ckpt/hf_names.h"
#include "ckpt/reshard_offline.h"
#include "ckpt/verify.h"
#include "comm/mpi_communicator.h"
#include "config/run_config.h"
#include "parallel/ep_placement.h"
#include "parallel/pp_placement.h"
#include "parallel/tp_shards.h"
#include "tests/ckpt/tiny_checkpoint.h"

namespace ms::ckpt {
namespace {

namespace fs = std::filesystem;

using test_support::tiny_model;
using test_support::tiny_moe_model;
using test_support::tiny_values;

using CliCheckpointTest = test_support::TinyCheckpointTest;

TEST_F(CliCheckpointTest, VerifyPassesIntactAndNamesAFlippedByte) {
  const std::string step = save("a", 5, tiny_values(0));
  if (world_->rank() != 0) return;
  Result<VerifyReport> ok = verify_checkpoint(dir_ + "/a", io::default_env());
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_TRUE(ok->ok());
  EXPECT_EQ(ok->tensors, hf_parameter_specs(tiny_model()).size() + 1);

  Result<Manifest> m = Manifest::read(step);
  ASSERT_TRUE(m.ok());
  const TensorRecord* t = m->find("model.norm.weight");
  ASSERT_NE(t, nullptr);
  const ShardRecord& s = t->shards.at(0);
  std::fstream f(step + "/" + s.file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(s.offset + 1));
  char byte = 0;
  f.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x10);
  f.seekp(static_cast<std::streamoff>(s.offset + 1));
  f.write(&byte, 1);
  f.close();

  Result<VerifyReport> bad = verify_checkpoint(step, io::default_env());
  ASSERT_TRUE(bad.ok());
  ASSERT_EQ(bad->problems.size(), 1u);
  const std::string& p = bad->problems[0];
  EXPECT_NE(p.find(s.file + " offset " + std::to_string(s.offset)), std::string::npos) << p;
  EXPECT_NE(p.find("'model.norm.weight'"), std::string::npos) << p;
  EXPECT_NE(p.find("crc32c mismatch"), std::string::npos) << p;
}

TEST_F(CliCheckpointTest, VerifyNamesATruncatedFile) {
  const std::string step = save("t", 1, tiny_values(0));
  if (world_->rank() != 0) return;
  Result<Manifest> m = Manifest::read(step);
  ASSERT_TRUE(m.ok());
  const std::string file = m->tensors.back().shards.back().file;
  fs::resize_file(step + "/" + file, 8);
  Result<VerifyReport> bad = verify_checkpoint(step, io::default_env());
  ASSERT_TRUE(bad.ok());
  ASSERT_FALSE(bad->ok());
  EXPECT_NE(bad->problems[0].find(file), std::string::npos);
  EXPECT_NE(bad->problems[0].find("truncated"), std::string::npos);
}

TEST_F(CliCheckpointTest, DiffReportsExactDifferencesBetweenCheckpoints) {
  std::vector<Tensor> b = tiny_values(0);
  b[0].data<float>()[3] += 0.5f;  // embedding, stored split across the ranks
  save("a", 1, tiny_values(0));
  save("b", 1, b);
  if (world_->rank() != 0) return;
  Result<OpenedCatalog> ca = open_tensor_catalog(dir_ + "/a", io::default_env());
  Result<OpenedCatalog> cb = open_tensor_catalog(dir_ + "/b/latest", io::default_env());
  ASSERT_TRUE(ca.ok() && cb.ok());
  Result<std::vector<TensorDiff>> d = diff_catalogs(ca->catalog, cb->catalog, {});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  for (const TensorDiff& t : *d) {
    if (t.name != "model.embed_tokens.weight") {
      EXPECT_TRUE(t.equal) << t.name;
      continue;
    }
    const float x = tiny_values(0)[0].data<float>()[3];
    EXPECT_FALSE(t.equal);
    EXPECT_EQ(t.mismatched, 1);
    EXPECT_DOUBLE_EQ(t.max_abs, std::fabs(static_cast<double>(x + 0.5f) - x));
    EXPECT_DOUBLE_EQ(t.max_rel, t.max_abs / static_cast<double>(x + 0.5f));
  }
  DiffOptions loose;
  loose.atol = 0.6;
  Result<std::vector<TensorDiff>> d2 = diff_catalogs(ca->catalog, cb->catalog, loose);
  ASSERT_TRUE(d2.ok());
  for (const TensorDiff& t : *d2) EXPECT_TRUE(t.equal) << t.name;
}

TEST_F(CliCheckpointTest, ExportedSafetensorsDiffEqualToTheCheckpoint) {
  const std::string step = save("a", 3, tiny_values(0.25f));
  if (world_->rank() != 0) return;
  Result<OpenedCatalog> ckpt = open_tensor_catalog(step, io::default_env());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  Result<config::ModelConfig> model =
      checkpoint_model_config(ckpt->manifest->config_yaml, step);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ(*model, tiny_model());
  HfExportOptions o;
  o.output_dir = dir_ + "/hf";
  o.max_shard_bytes = 1024;
  ASSERT_TRUE(export_hf(*model, ckpt->catalog, o).ok());
  Result<OpenedCatalog> hf = open_tensor_catalog(dir_ + "/hf", io::default_env());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_FALSE(hf->is_checkpoint);
  DiffOptions params_only;
  params_only.parameters_only = true;
  Result<std::vector<TensorDiff>> d = diff_catalogs(ckpt->catalog, hf->catalog, params_only);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->size(), hf_parameter_specs(tiny_model()).size());
  for (const TensorDiff& t : *d) EXPECT_TRUE(t.equal) << t.name;
}

TEST_F(CliCheckpointTest, DiffOfCraftedTensorsAcrossDtypesAndNaN) {
  if (world_->rank() != 0) return;
  Tensor a = Tensor::empty(DType::kF32, {4});
  Tensor b = Tensor::empty(DType::kBF16, {4});
  const float av[] = {1.0f, -2.0f, NAN, 0.0f};
  const float bv[] = {1.0f, -2.5f, NAN, 0.0f};
  for (int i = 0; i < 4; ++i) {
    a.data<float>()[i] = av[i];
    b.data<bf16>()[i] = bf16{float_to_bf16(bv[i])};
  }
  TensorDiff d = diff_tensors("x", a, b, 0, 0);
  EXPECT_DOUBLE_EQ(d.max_abs, 0.5);
  EXPECT_DOUBLE_EQ(d.max_rel, 0.2);
  EXPECT_EQ(d.mismatched, 1);
  EXPECT_TRUE(diff_tensors("x", a, b, 0, 0.2).equal);
  EXPECT_EQ(diff_tensors("x", a, *convert(b, DType::kF32), 0.5, 0).mismatched, 0);
}

TEST_F(CliCheckpointTest, ReshardToFourRanksWithZeroKeepsEveryValue) {
  const std::string step = save("a", 9, tiny_values(0));
  ReshardOptions options;
  options.output_dir = dir_ + "/r";
  options.target = *parse_reshard_target("dp=4,zero=1");
  options.max_shard_bytes = 256;
  Result<std::string> out = reshard_checkpoint(step, options, *world_, io::default_env());
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, dir_ + "/r/" + step_dir_name(9));
  if (world_->rank() != 0) return;
  Result<Manifest> m = Manifest::read(*out);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->layout.dp, 4);
  EXPECT_EQ(m->layout.zero, 1);
  std::set<std::string> files;
  for (const ShardRecord& s : m->find("optimizer.exp_avg.lm_head.weight")->shards) {
    files.insert(s.file);
    EXPECT_LE(s.length, 256u);
  }
  EXPECT_EQ(files.size(), 4u);  // one flat range per dp rank
  Result<VerifyReport> v = verify_checkpoint(dir_ + "/r", io::default_env());
  ASSERT_TRUE(v.ok() && v->ok());
  Result<OpenedCatalog> a = open_tensor_catalog(step, io::default_env());
  Result<OpenedCatalog> b = open_tensor_catalog(dir_ + "/r", io::default_env());
  Result<std::vector<TensorDiff>> d = diff_catalogs(a->catalog, b->catalog, {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->size(), m->tensors.size());
  for (const TensorDiff& t : *d) EXPECT_TRUE(t.equal) << t.name;
}

// Every tensor of a and b is equal (and b has the same tensors).
void expect_same_tensors(const std::string& a, const std::string& b) {
  Result<OpenedCatalog> ca = open_tensor_catalog(a, io::default_env());
  Result<OpenedCatalog> cb = open_tensor_catalog(b, io::default_env());
  ASSERT_TRUE(ca.ok() && cb.ok());
  Result<std::vector<TensorDiff>> d = diff_catalogs(ca->catalog, cb->catalog, {});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->size(), ca->manifest->tensors.size());
  int differ = 0;
  for (const TensorDiff& t : *d) differ += t.equal ? 0 : 1;
  EXPECT_EQ(differ, 0);
}

// The files (data_file_name of a target rank) holding tensor `name`.
std::set<std::string> files_of(const Manifest& m, const std::string& name) {
  std::set<std::string> out;
  for (const ShardRecord& s : m.find(name)->shards) out.insert(s.file);
  return out;
}

// pp=2,tp=2 on a 2-layer model: target ranks 0, 1 are stage 0 (embedding, layer 0), ranks 2, 3
// stage 1 (layer 1, norm, lm_head and its moment).
TEST_F(CliCheckpointTest, ReshardToPipelineStagesAndBackKeepsEveryValue) {
  model_ = tiny_model(2);
  const std::string step = save("a", 4, tiny_values(0, model_));
  ReshardOptions options;
  options.output_dir = dir_ + "/pp";
  options.target = *parse_reshard_target("pp=2,tp=2");
  options.tp_placement = parallel::tp_shard;
  options.pp_placement = parallel::pp_ranks_holding;
  options.max_shard_bytes = 128;
  Result<std::string> pp = reshard_checkpoint(step, options, *world_, io::default_env());
  ASSERT_TRUE(pp.ok()) << pp.status().to_string();
  ReshardOptions back = options;
  back.output_dir = dir_ + "/back";
  back.target = *parse_reshard_target("dp=1");
  Result<std::string> single = reshard_checkpoint(*pp, back, *world_, io::default_env());
  ASSERT_TRUE(single.ok()) << single.status().to_string();
  if (world_->rank() != 0) return;
  Result<Manifest> m = Manifest::read(*pp);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->layout, (Layout{4, 1, 2, 2, 1, 0}));
  const std::set<std::string> stage0 = {data_file_name(0), data_file_name(1)};
  const std::set<std::string> stage1 = {data_file_name(2), data_file_name(3)};
  EXPECT_EQ(files_of(*m, "model.embed_tokens.weight"), stage0);
  EXPECT_EQ(files_of(*m, "model.layers.0.self_attn.q_proj.weight"), stage0);
  EXPECT_EQ(files_of(*m, "model.layers.1.self_attn.q_proj.weight"), stage1);
  EXPECT_EQ(files_of(*m, "lm_head.weight"), stage1);
  EXPECT_EQ(files_of(*m, "optimizer.exp_avg.lm_head.weight"), stage1);
  EXPECT_EQ(files_of(*m, "model.norm.weight").size(), 1u);
  EXPECT_TRUE(stage1.contains(*files_of(*m, "model.norm.weight").begin()));
  Result<VerifyReport> v = verify_checkpoint(*pp, io::default_env());
  ASSERT_TRUE(v.ok() && v->ok());
  expect_same_tensors(step, *pp);
  expect_same_tensors(step, *single);
  EXPECT_EQ(Manifest::read(*single)->layout, (Layout{1, 1, 1, 1, 1, 0}));
}

// ep=2,dp=2 on a 4-expert model: experts 0, 1 (and expert 0's moment) go to rank 0's file,
// experts 2, 3 to rank 1's; the router and the shared expert to either. Resharded back to dp=1
// every value is unchanged.
TEST_F(CliCheckpointTest, ReshardToExpertParallelAndBackKeepsEveryValue) {
  model_ = tiny_moe_model();
  const std::string step = save("a", 6, tiny_values(0, model_));
  ReshardOptions options;
  options.output_dir = dir_ + "/ep";
  options.target = *parse_reshard_target("ep=2,dp=2");
  options.tp_placement = parallel::tp_shard;
  options.pp_placement = parallel::pp_ranks_holding;
  options.ep_placement = parallel::ep_rank_holding;
  options.max_shard_bytes = 128;
  Result<std::string> ep = reshard_checkpoint(step, options, *world_, io::default_env());
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  ReshardOptions back = options;
  back.output_dir = dir_ + "/back";
  back.target = *parse_reshard_target("dp=1");
  Result<std::string> single = reshard_checkpoint(*ep, back, *world_, io::default_env());
  ASSERT_TRUE(single.ok()) << single.status().to_string();
  if (world_->rank() != 0) return;
  Result<Manifest> m = Manifest::read(*ep);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->layout, (Layout{2, 2, 1, 1, 2, 0}));
  const std::string experts = "model.layers.0.block_sparse_moe.experts.";
  const std::set<std::string> rank0 = {data_file_name(0)}, rank1 = {data_file_name(1)};
  for (const char* w : {"w1", "w2", "w3"}) {
    EXPECT_EQ(files_of(*m, experts + "0." + w + ".weight"), rank0) << w;
    EXPECT_EQ(files_of(*m, experts + "1." + w + ".weight"), rank0) << w;
    EXPECT_EQ(files_of(*m, experts + "2." + w + ".weight"), rank1) << w;
    EXPECT_EQ(files_of(*m, experts + "3." + w + ".weight"), rank1) << w;
  }
  EXPECT_EQ(files_of(*m, "optimizer.exp_avg." + experts + "0.w1.weight"), rank0);
  EXPECT_EQ(files_of(*m, "model.layers.0.block_sparse_moe.gate.weight").size(), 1u);
  Result<VerifyReport> v = verify_checkpoint(*ep, io::default_env());
  ASSERT_TRUE(v.ok() && v->ok());
  expect_same_tensors(step, *ep);
  expect_same_tensors(step, *single);
  EXPECT_EQ(Manifest::read(*single)->layout, (Layout{1, 1, 1, 1, 1, 0}));
}

// A dense model has no experts for ep ranks to hold: refused, naming model.moe.num_experts,
// before anything is written.
TEST_F(CliCheckpointTest, ReshardOfADenseModelToExpertParallelIsRefused) {
  const std::string step = save("a", 3, tiny_values(0));
  ReshardOptions options;
  options.output_dir = dir_ + "/ep";
  options.target = *parse_reshard_target("ep=2,dp=2");
  options.ep_placement = parallel::ep_rank_holding;
  Result<std::string> out = reshard_checkpoint(step, options, *world_, io::default_env());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("model.moe.num_experts 0"), std::string::npos)
      << out.status().message();
  EXPECT_FALSE(fs::exists(dir_ + "/ep/" + step_dir_name(3)));
}

// The tiny model's one layer cannot make two stages: refused with pp_stage_layers' reason
// before anything is written.
TEST_F(CliCheckpointTest, ReshardToMoreStagesThanLayersIsRefused) {
  const std::string step = save("a", 2, tiny_values(0));
  ReshardOptions options;
  options.output_dir = dir_ + "/pp";
  options.target = *parse_reshard_target("pp=2");
  options.pp_placement = parallel::pp_ranks_holding;
  Result<std::string> out = reshard_checkpoint(step, options, *world_, io::default_env());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("does not split evenly"), std::string::npos)
      << out.status().message();
  EXPECT_FALSE(fs::exists(dir_ + "/pp/" + step_dir_name(2)));
}

TEST_F(CliCheckpointTest, ReshardTargetsAreParsedStrictly) {
  EXPECT_EQ(parse_reshard_target("dp=8").value().dp, 8);
  EXPECT_EQ(parse_reshard_target("tp=2").value().tp, 2);
  EXPECT_EQ(parse_reshard_target("pp=2").value().pp, 2);
  EXPECT_NE(parse_reshard_target("ep=2").status().message().find("ep"), std::string::npos);
  EXPECT_NE(parse_reshard_target("dq=2").status().message().find("unknown key 'dq'"),
            std::string::npos);
  EXPECT_FALSE(parse_reshard_target("dp=x").ok());
  EXPECT_FALSE(parse_reshard_target("dp=0").ok());
  EXPECT_FALSE(parse_reshard_target("zero=2").ok());
}

}  // namespace
}  // namespace ms::ckpt
