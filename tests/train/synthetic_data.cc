// Synthetic dataset and plan for trainer tests; see synthetic_data.h.
#include "synthetic_data.h"

#include <stdlib.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "data/dataset_meta.h"
#include "data/indexed_dataset.h"
#include "data/plan_builder.h"

namespace ms::train::testing {
namespace {

std::vector<int32_t> document_tokens(int64_t doc, int64_t vocab) {
  const int64_t length = 40 + (doc * 37) % 90;
  std::vector<int32_t> tokens(static_cast<size_t>(length));
  int64_t t = (doc * 7) % vocab;
  for (int32_t& token : tokens) {
    token = static_cast<int32_t>(t);
    t = (3 * t + 1) % vocab;
  }
  return tokens;
}

}  // namespace

Result<std::string> write_synthetic_plan(const std::string& dir,
                                         const SyntheticPlanOptions& options) {
  const std::string prefix = dir + "/synthetic";
  MS_ASSIGN_OR_RETURN(std::unique_ptr<data::IndexedDatasetWriter> writer,
                      data::IndexedDatasetWriter::create(
                          prefix, data::dtype_code_for_vocab(options.vocab_size)));
  for (int64_t d = 0; d < options.documents; ++d) {
    MS_RETURN_IF_ERROR(writer->add_document(document_tokens(d, options.vocab_size)));
  }
  data::DatasetMeta meta;
  meta.vocab_size = options.vocab_size;
  meta.tokenizer_kind = "synthetic";
  MS_RETURN_IF_ERROR(writer->finish(meta));
  data::MixtureConfig mixture;
  mixture.sources = {{"synthetic", prefix, 1.0}};
  mixture.seq_len = options.seq_len;
  mixture.total_samples = options.train_samples;
  mixture.validation.fraction = 0.1;
  mixture.validation.samples = 32;
  const std::string plan = dir + "/synthetic.plan";
  MS_RETURN_IF_ERROR(data::plan_mixture(mixture, plan).status());
  return plan;
}

Result<std::string> make_shared_plan_dir(comm::Communicator& world, const std::string& tmpl) {
  std::array<char, 256> dir{};
  Status made;
  if (world.rank() == 0) {
    std::strncpy(dir.data(), tmpl.c_str(), dir.size() - 1);
    if (mkdtemp(dir.data()) == nullptr) {
      made = ErrnoError("mkdtemp", tmpl, errno);
    } else {
      made = write_synthetic_plan(dir.data()).status();
    }
    if (!made.ok()) dir.fill(0);
  }
  MS_RETURN_IF_ERROR(world.broadcast(dir.data(), dir.size(), DType::kU8, 0));
  MS_RETURN_IF_ERROR(made);
  if (dir[0] == 0) return Internal("rank 0 could not make the test directory");
  return std::string(dir.data());
}

config::RunConfig tiny_run_config(const std::string& dir, const std::string& name, int64_t zero) {
  config::RunConfig c;
  c.run.dir = dir + "/" + name;
  c.run.seed = 7;
  c.model.vocab_size = 96;
  c.model.d_model = 32;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.d_ff = 64;
  c.model.max_seq_len = 16;
  c.parallel.zero = zero;
  c.optim.lr = 1e-2;
  c.optim.warmup_steps = 2;
  c.optim.min_lr = 1e-3;
  c.train = {.steps = 5, .global_batch = 8, .micro_batch = 1, .seq_len = 16, .eval_every = 0};
  c.train.mfu_peak_gflops = 1;
  c.train.bucket_mb = 0.01;  // several buckets, so overlap and ordering are exercised
  c.data.plan = dir + "/synthetic.plan";
  c.telemetry.every_s = 60;
  return c;
}

}  // namespace ms::train::testing
