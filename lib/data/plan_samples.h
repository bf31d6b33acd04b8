// PlanSampleReader: materializes the packed samples of a plan from its source datasets. It opens
// only the datasets a split draws from, checks each against the content hash recorded at
// planning time (a dataset rebuilt or edited since then is refused, naming the source), and
// reads exactly the token ranges a sample covers. Used by the Loader, by disaggregated loader
// ranks and by `ms-data dump-plan`.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/indexed_dataset.h"
#include "data/plan.h"

namespace ms::data {

class PlanSampleReader {
 public:
  // Opens the datasets of the sources that `split` uses. FailedPrecondition naming the source
  // and prefix when a dataset's content hash or sequence count differs from the plan's record;
  // the dataset's own open error (NotFound, Corruption) with the source name otherwise.
  static Result<std::unique_ptr<PlanSampleReader>> open(std::shared_ptr<const Plan> plan, Split split);

  const Plan& plan() const { return *plan_; }
  Split split() const { return split_; }
  int64_t seq_len() const { return plan_->info().seq_len; }
  int64_t samples() const { return plan_->samples(split_); }

  // Writes the seq_len + 1 tokens of global sample `global` (< samples()) into `out`, which must
  // hold seq_len + 1 ints. Corruption when a range does not fit the dataset (cannot happen for a
  // plan whose hashes matched, but a read never goes out of bounds).
  Status read(int64_t global, std::span<int32_t> out) const;

  // Vocabulary size and tokenizer path of the plan's sources (the first source that records
  // them); 0 and "" when no dataset has a meta sidecar.
  int32_t vocab_size() const { return vocab_size_; }
  const std::string& tokenizer_path() const { return tokenizer_path_; }
  size_t open_datasets() const;

 private:
  PlanSampleReader() = default;

  std::shared_ptr<const Plan> plan_;
  Split split_ = Split::kTrain;
  std::vector<std::optional<IndexedDataset>> datasets_;  // per source; empty when unused
  int32_t vocab_size_ = 0;
  std::string tokenizer_path_;
};

}  // namespace ms::data
