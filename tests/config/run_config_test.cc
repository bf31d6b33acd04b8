// The toolkit's run config: its defaults, the rules between keys, --set on real keys, the
// bundled configs/ files, and docs/config.md staying in step with the schema.
#include "config/run_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace ms::config {
namespace {

using ::testing::HasSubstr;

RunConfig load_ok(const std::string& text, const std::vector<std::string>& sets = {}) {
  Result<RunConfig> r = run_config_from_yaml_text(text, "run.yaml", sets);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : RunConfig{};
}

std::string error_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  Result<RunConfig> r = run_config_from_yaml_text(text, "run.yaml", sets);
  EXPECT_FALSE(r.ok()) << "loaded unexpectedly: " << text;
  return r.ok() ? "" : r.status().message();
}

// A path under the source tree: MS_SOURCE_DIR (set by ctest), else the tree this test was
// built from.
std::string source_path(const std::string& relative) {
  const char* root = std::getenv("MS_SOURCE_DIR");
  return std::string(root ? root : MS_CONFIG_TEST_SOURCE_DIR) + "/" + relative;
}

TEST(RunConfig, DefaultsFollowTheDesignExample) {
  const RunConfig c = load_ok("");
  EXPECT_EQ(c, RunConfig{});
  EXPECT_EQ(c.run.seed, 1234);
  EXPECT_EQ(c.model.vocab_size, 8192);
  EXPECT_EQ(c.model.d_ff, 1376);
  EXPECT_EQ(c.model.moe.num_experts, 0);
  EXPECT_EQ(c.parallel.dp, 1);
  EXPECT_EQ(c.optim.name, OptimizerKind::kAdamW);
  EXPECT_EQ(c.optim.betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(c.optim.schedule, LrSchedule::kCosine);
  EXPECT_EQ(c.train.global_batch, 64);
  EXPECT_EQ(c.checkpoint.resume, "auto");
  EXPECT_EQ(c.telemetry.every_s, 1.0);
}

TEST(RunConfig, ReadsTheDesignExampleInFlowStyle) {
  const RunConfig c = load_ok(R"(
run:        {name: small, dir: runs/small, seed: 1234}
model:      {vocab_size: 8192, d_model: 512, n_layers: 8, n_heads: 8, n_kv_heads: 4, d_ff: 1376,
             max_seq_len: 1024, rope_theta: 10000, tie_embeddings: false,
             moe: {num_experts: 0, top_k: 2, aux_loss_coef: 0.01}}
parallel:   {dp: 2, tp: 1, pp: 1, ep: 1, zero: 1}
optim:      {name: lamb, lr: 3.0e-4, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1,
             grad_clip: 1.0, schedule: linear, warmup_steps: 100, min_lr: 3.0e-5}
train:      {steps: 1000, global_batch: 64, micro_batch: 4, seq_len: 256, eval_every: 100}
data:       {plan: data/mix.plan}
checkpoint: {every: 100, async: true, keep: 3, resume: auto}
telemetry:  {every_s: 1}
)");
  EXPECT_EQ(c.run.name, "small");
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.optim.name, OptimizerKind::kLamb);
  EXPECT_EQ(c.optim.schedule, LrSchedule::kLinear);
  EXPECT_EQ(c.data.plan, "data/mix.plan");
}

TEST(RunConfig, MisspelledKeyNamesFileLineAndSuggestion) {
  EXPECT_EQ(error_of("optim:\n    lr: 0.001\n    lrr: 2\n"),
            "run.yaml:3:5: unknown key 'optim.lrr'; did you mean 'optim.lr'?");
  EXPECT_EQ(error_of("train:\n  lr: 0.001\n"),
            "run.yaml:2:3: unknown key 'train.lr'; did you mean 'optim.lr'?");
}

TEST(RunConfig, WrongTypeNamesExpectedTypeAndValue) {
  EXPECT_EQ(error_of("run: {seed: 1}\n\n\n\n\n\ntrain:\n  steps: ten\n"),
            "run.yaml:8:10: 'train.steps' expects an integer, got 'ten'");
  EXPECT_EQ(error_of("optim: {name: sgd}"),
            "run.yaml:1:15: 'optim.name' expects one of adamw, lamb, got 'sgd'");
  EXPECT_EQ(error_of("optim: {schedule: step}"),
            "run.yaml:1:19: 'optim.schedule' expects one of cosine, linear, constant, got 'step'");
}

TEST(RunConfig, OutOfRangeValuesStateTheRange) {
  EXPECT_EQ(error_of("optim: {betas: [0.9, 1.0]}"),
            "run.yaml:1:16: 'optim.betas' items must be in [0, 1), got 1");
  EXPECT_EQ(error_of("optim: {lr: 0}"), "run.yaml:1:13: 'optim.lr' must be > 0, got 0");
  EXPECT_EQ(error_of("parallel: {zero: 2}"),
            "run.yaml:1:18: 'parallel.zero' must be in [0, 1], got 2");
}

struct RuleCase {
  std::vector<std::string> sets;
  std::string message;
};

class RunConfigRules : public ::testing::TestWithParam<RuleCase> {};

TEST_P(RunConfigRules, ViolationIsExplained) {
  EXPECT_EQ(error_of("", GetParam().sets), "run.yaml: " + GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    CrossField, RunConfigRules,
    ::testing::Values(
        RuleCase{{"model.n_kv_heads=3"},
                 "model.n_heads (8) must be divisible by model.n_kv_heads (3)"},
        RuleCase{{"model.d_model=500"},
                 "model.d_model (500) must be divisible by model.n_heads (8)"},
        RuleCase{{"model.d_model=24", "model.n_heads=8", "model.n_kv_heads=8"},
                 "head size model.d_model / model.n_heads = 3 must be even for rotary embeddings"},
        RuleCase{{"model.moe.num_experts=2", "model.moe.top_k=3"},
                 "model.moe.top_k (3) must not exceed model.moe.num_experts (2)"},
        RuleCase{{"train.seq_len=2048"},
                 "train.seq_len (2048) must not exceed model.max_seq_len (1024)"},
        RuleCase{{"parallel.tp=3"},
                 "model.n_heads (8) must be divisible by parallel.tp (3)\n"
                 "run.yaml: model.n_kv_heads (4) must be divisible by parallel.tp (3)\n"
                 "run.yaml: model.d_ff (1376) must be divisible by parallel.tp (3)"},
        RuleCase{{"parallel.pp=9"}, "parallel.pp (9) must not exceed model.n_layers (8)"},
        RuleCase{{"parallel.cp=3"},
                 "train.seq_len (256) must be divisible by 2 * parallel.cp (6)"},
        RuleCase{{"parallel.dp=2", "parallel.ep=2"},
                 "parallel.ep (2) needs MoE layers; set model.moe.num_experts or parallel.ep=1"},
        RuleCase{{"parallel.dp=2", "parallel.ep=2", "model.moe.num_experts=3"},
                 "model.moe.num_experts (3) must be divisible by parallel.ep (2)"},
        RuleCase{{"parallel.dp=3"},
                 "train.global_batch (64) must be divisible by parallel.dp * train.micro_batch "
                 "(12)"},
        RuleCase{{"optim.min_lr=0.01"}, "optim.min_lr (0.01) must not exceed optim.lr (0.0003)"},
        RuleCase{{"train.document_positions=true"},
                 "train.document_positions restarts rotary positions at each document, which "
                 "needs train.document_mask: true (set both, or neither)"}));

TEST(RunConfig, DocumentMaskKeys) {
  const RunConfig off = load_ok("");
  EXPECT_FALSE(off.train.document_mask);
  EXPECT_FALSE(off.train.document_positions);
  EXPECT_EQ(off.data.eod_id, -1);
  const RunConfig on = load_ok("", {"train.document_mask=true", "train.document_positions=true",
                                    "data.eod_id=50256"});
  EXPECT_TRUE(on.train.document_mask);
  EXPECT_TRUE(on.train.document_positions);
  EXPECT_EQ(on.data.eod_id, 50256);
  EXPECT_EQ(error_of("", {"data.eod_id=-2"}),
            "--set data.eod_id=-2: 'data.eod_id' must be >= -1, got -2");
}

TEST(RunConfig, DeviceAndPrecisionKeys) {
  const RunConfig cpu = load_ok("");
  EXPECT_EQ(cpu.train.device, "cpu");
  EXPECT_EQ(cpu.train.precision, Precision::kF32);
  EXPECT_EQ(load_ok("", {"train.device=cuda:1"}).train.device, "cuda:1");
  const std::string bad = error_of("", {"train.device=gpu"});
  EXPECT_NE(bad.find("train.device: "), std::string::npos) << bad;
  EXPECT_NE(bad.find("gpu"), std::string::npos) << bad;
  EXPECT_EQ(load_ok("", {"train.precision=bf16"}).train.precision, Precision::kBf16);
  EXPECT_NE(error_of("", {"train.precision=fp8"}).find("f32"), std::string::npos);
}

// Products of parallel sizes are checked, never wrapped: a wrapped product once read as
// "2 * parallel.cp (-9223372036854775808)" or divided by zero.
TEST(RunConfig, OverflowingParallelProductsAreNamedNotWrapped) {
  const auto expect_line = [](const std::vector<std::string>& sets, const std::string& line) {
    const std::string error = error_of("", sets);
    EXPECT_NE(error.find("run.yaml: " + line), std::string::npos) << error;
    EXPECT_EQ(error.find("-9223372036854775808"), std::string::npos) << error;
    EXPECT_EQ(error.find("(0)"), std::string::npos) << error;
  };
  expect_line({"parallel.cp=4611686018427387904"},
              "2 * parallel.cp (2 * 4611686018427387904) overflows 64 bits");
  expect_line({"parallel.dp=4611686018427387904"},
              "parallel.dp * train.micro_batch (4611686018427387904 * 4) overflows 64 bits");
  expect_line({"parallel.dp=4294967296", "parallel.cp=4294967296"},
              "parallel.pp * parallel.dp * parallel.cp * parallel.tp (1 * 4294967296 * "
              "4294967296 * 1) overflows 64 bits");
  expect_line({"parallel.dp=65536", "parallel.cp=65536"},
              "parallel.pp * parallel.dp * parallel.cp * parallel.tp (1 * 65536 * 65536 * 1) = "
              "4294967296 exceeds 2147483647 (the ranks MPI can number)");
  expect_line({"parallel.vpp=9223372036854775807", "parallel.pp=2"},
              "parallel.pp * parallel.vpp (2 * 9223372036854775807) overflows 64 bits");
}

TEST(RunConfig, EveryRuleViolationIsListed) {
  EXPECT_EQ(error_of("", {"model.n_kv_heads=3", "train.seq_len=2048"}),
            "run.yaml: model.n_heads (8) must be divisible by model.n_kv_heads (3)\n"
            "run.yaml: train.seq_len (2048) must not exceed model.max_seq_len (1024)");
}

TEST(RunConfigSet, OverridesAnyKey) {
  const RunConfig c = load_ok("train: {steps: 5}\n",
                              {"train.steps=7", "optim.betas=[0.8, 0.99]", "optim.name=lamb",
                               "checkpoint.resume=runs/a/checkpoints/latest", "model.moe.top_k=1"});
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.optim.betas, (std::vector<double>{0.8, 0.99}));
  EXPECT_EQ(c.optim.name, OptimizerKind::kLamb);
  EXPECT_EQ(c.checkpoint.resume, "runs/a/checkpoints/latest");
  EXPECT_EQ(c.model.moe.top_k, 1);
}

TEST(RunConfigSet, FailuresNameTheArgument) {
  EXPECT_EQ(error_of("", {"train.steps=abc"}),
            "--set train.steps=abc: 'train.steps' expects an integer, got 'abc'");
  EXPECT_EQ(error_of("", {"optim.lrr=1e-3"}),
            "--set optim.lrr=1e-3: unknown key 'optim.lrr'; did you mean 'optim.lr'?");
  EXPECT_EQ(error_of("", {"optm.lr=1e-3"}),
            "--set optm.lr=1e-3: unknown key 'optm.lr'; did you mean 'optim.lr'?");
}

TEST(RunConfigDump, ReloadsToTheSameConfig) {
  const RunConfig c = load_ok("", {"run.name=exp 7", "model.moe.num_experts=4", "parallel.dp=2",
                                   "parallel.ep=2", "optim.lr=0.00123", "optim.betas=[0.85, 0.975]",
                                   "optim.schedule=constant", "data.plan=data/x.plan",
                                   "checkpoint.async=false", "telemetry.every_s=0.25",
                                   "model.rope_theta=500000", "model.norm_eps=1e-6"});
  for (bool describe : {false, true}) {
    const std::string yaml = dump_yaml(c, describe);
    EXPECT_EQ(load_ok(yaml), c) << yaml;
  }
}

TEST(RunConfigDump, ListsEveryKeyGroupedBySection) {
  const std::string yaml = dump_yaml(RunConfig{});
  EXPECT_EQ(yaml.substr(0, 45), "run:\n  name: run\n  dir: runs/run\n  seed: 1234");
  EXPECT_THAT(yaml, HasSubstr("\n  moe:\n    num_experts: 0\n    top_k: 2\n"));
  EXPECT_THAT(yaml, HasSubstr("\n  betas: [0.9, 0.95]\n"));
  EXPECT_THAT(yaml, HasSubstr("\n  eps: 1.0e-8\n"));
  EXPECT_THAT(yaml, HasSubstr("\ndata:\n  plan: \"\"\n"));
}

TEST(RunConfigDocs, HelpListsEveryKey) {
  const std::string help = help_text();
  for (const auto& field : run_config_schema().fields()) {
    EXPECT_THAT(help, HasSubstr("\n" + field->path() + " ")) << field->path();
  }
}

TEST(RunConfigFiles, MissingFileIsNotFound) {
  Result<RunConfig> r = load_run_config("/nonexistent/run.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST(RunConfigFiles, TinyCpuConfigLoads) {
  Result<RunConfig> r = load_run_config(source_path("configs/tiny-cpu.yaml"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model.d_model, 128);
  EXPECT_EQ(r->model.n_layers, 4);
  EXPECT_EQ(r->model.n_heads, 4);
  EXPECT_EQ(r->model.n_kv_heads, 4);
  EXPECT_EQ(r->model.vocab_size, 1024);  // the demo's learned tokenizer
  EXPECT_EQ(r->model.moe.num_experts, 0);
  EXPECT_EQ(r->train.seq_len, 128);
  EXPECT_EQ(r->parallel.dp, 2);
  EXPECT_EQ(r->train.steps, 400);
  EXPECT_EQ(r->train.global_batch, 16);
  EXPECT_EQ(r->train.micro_batch, 4);
  EXPECT_EQ(r->data.plan, "data/shakespeare.plan");
  EXPECT_EQ(r->run.dir, "runs/tiny");
}

TEST(RunConfigFiles, TinyMoeConfigLoads) {
  Result<RunConfig> r = load_run_config(source_path("configs/tiny-moe.yaml"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model.moe.num_experts, 4);
  EXPECT_EQ(r->model.moe.top_k, 2);
}

TEST(RunConfigFiles, LongContextConfigLoads) {
  Result<RunConfig> r = load_run_config(source_path("configs/long-context.yaml"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->parallel.cp, 2);
  EXPECT_EQ(r->train.seq_len, 8192);
  EXPECT_EQ(r->train.seq_len % (2 * r->parallel.cp), 0);
}

TEST(RunConfigFiles, BundledConfigsTakeOverrides) {
  Result<RunConfig> r = load_run_config(source_path("configs/tiny-cpu.yaml"),
                                        {"parallel.dp=1", "train.steps=3"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->parallel.dp, 1);
  EXPECT_EQ(r->train.steps, 3);
}

// docs/config.md embeds reference_markdown() between these markers. Run this test with
// MS_UPDATE_DOCS=1 to rewrite that part of the file after changing the schema.
constexpr std::string_view kBegin = "<!-- BEGIN GENERATED KEY REFERENCE -->\n";
constexpr std::string_view kEnd = "<!-- END GENERATED KEY REFERENCE -->";

TEST(RunConfigDocs, ReferenceInDocsIsUpToDate) {
  const std::string path = source_path("docs/config.md");
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string doc = buffer.str();
  const std::size_t begin = doc.find(kBegin);
  const std::size_t end = doc.find(kEnd);
  ASSERT_NE(begin, std::string::npos) << path << " lacks the marker " << kBegin;
  ASSERT_NE(end, std::string::npos) << path << " lacks the marker " << kEnd;
  const std::size_t body = begin + kBegin.size();
  const std::string embedded = doc.substr(body, end - body);
  if (embedded != reference_markdown() && std::getenv("MS_UPDATE_DOCS") != nullptr) {
    doc.replace(body, end - body, reference_markdown());
    std::ofstream(path) << doc;
    return;
  }
  EXPECT_EQ(embedded, reference_markdown())
      << path << " is out of date with the schema; rerun this test with MS_UPDATE_DOCS=1 "
      << "(e.g. MS_UPDATE_DOCS=1 ctest -R RunConfigDocs) to regenerate it";
}

}  // namespace
}  // namespace ms::config
