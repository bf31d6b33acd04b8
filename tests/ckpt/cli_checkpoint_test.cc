// The ms-ckpt command library on checkpoints written by the real save path on 2 ranks (one
// tensor split between them, the rest replicated): verify passes an intact checkpoint and names
// the file, tensor and offset of a flipped byte; diff reports exact max abs/rel differences on
// crafted tensors; export of a checkpoint to safetensors diffs equal against it.
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
#include "tests/ckpt/tiny_checkpoint.h"

namespace ms::ckpt {
namespace {

namespace fs = std::filesystem;

using test_support::tiny_model;
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

TEST_F(CliCheckpointTest, ReshardTargetsAreParsedStrictly) {
  EXPECT_EQ(parse_reshard_target("dp=8").value().dp, 8);
  EXPECT_EQ(parse_reshard_target("tp=2").value().tp, 2);
  EXPECT_NE(parse_reshard_target("pp=2").status().message().find("pp"), std::string::npos);
  EXPECT_NE(parse_reshard_target("dq=2").status().message().find("unknown key 'dq'"),
            std::string::npos);
  EXPECT_FALSE(parse_reshard_target("dp=x").ok());
  EXPECT_FALSE(parse_reshard_target("dp=0").ok());
  EXPECT_FALSE(parse_reshard_target("zero=2").ok());
}

}  // namespace
}  // namespace ms::ckpt
