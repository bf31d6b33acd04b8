// Synthetic dataset and plan for trainer tests; see synthetic_data.h.
#include "synthetic_data.h"

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

}  // namespace ms::train::testing
