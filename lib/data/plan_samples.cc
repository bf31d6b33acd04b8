// Reading packed plan samples from their datasets; see plan_samples.h.
#include "data/plan_samples.h"

namespace ms::data {

namespace {

Status check_dataset(const PlanSource& source, const IndexedDataset& dataset) {
  if (dataset.content_hash() != source.content_hash ||
      dataset.num_sequences() != source.dataset_sequences) {
    return FailedPrecondition(
        "source '" + source.name + "': dataset '" + source.prefix +
        "' changed since the plan was made (content hash " + dataset.content_hash() + ", " +
        std::to_string(dataset.num_sequences()) + " sequences; the plan recorded " +
        source.content_hash + ", " + std::to_string(source.dataset_sequences) +
        "); re-run 'ms-data plan' for this dataset");
  }
  return Status::OK();
}

// The plan's stream of `source` must be made of the dataset's real sequences: entry i spans
// exactly the length of sequence order[i]. Then every sample a plan can address lies inside the
// dataset, whatever numbers the plan file claims.
Status check_stream_lengths(const Plan& plan, Split split, uint32_t source,
                            const IndexedDataset& dataset) {
  const std::span<const uint32_t> order = plan.sequence_order(split, source);
  const std::span<const uint64_t> ends = plan.stream_end(split, source);
  uint64_t begin = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const uint64_t length = static_cast<uint64_t>(dataset.sequence_length(order[i]));
    if (ends[i] - begin != length) {
      return Corruption("plan '" + plan.path() + "': source '" + plan.info().sources[source].name + "' " +
                        std::string(split_name(split)) + " stream entry " + std::to_string(i) +
                        " spans " + std::to_string(ends[i] - begin) + " tokens but sequence " +
                        std::to_string(order[i]) + " of '" + dataset.prefix() + "' has " +
                        std::to_string(length) + "; the plan does not describe this dataset");
    }
    begin = ends[i];
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<PlanSampleReader>> PlanSampleReader::open(std::shared_ptr<const Plan> plan,
                                                                 Split split) {
  std::unique_ptr<PlanSampleReader> reader(new PlanSampleReader());
  const std::vector<PlanSource>& sources = plan->info().sources;
  reader->datasets_.resize(sources.size());
  for (size_t s = 0; s < sources.size(); ++s) {
    const PlanSource& source = sources[s];
    if (reader->vocab_size_ == 0 && source.vocab_size > 0) {
      reader->vocab_size_ = static_cast<int32_t>(source.vocab_size);
      reader->tokenizer_path_ = source.tokenizer_path;
    }
    if (source.splits[static_cast<int>(split)].samples == 0) continue;
    Result<IndexedDataset> dataset = IndexedDataset::open(source.prefix);
    if (!dataset.ok()) {
      return dataset.status().with_context("plan '" + plan->path() + "' source '" + source.name + "'");
    }
    MS_RETURN_IF_ERROR(check_dataset(source, *dataset).with_context("plan '" + plan->path() + "'"));
    MS_RETURN_IF_ERROR(check_stream_lengths(*plan, split, static_cast<uint32_t>(s), *dataset));
    reader->datasets_[s].emplace(std::move(dataset).value());
  }
  reader->plan_ = std::move(plan);
  reader->split_ = split;
  return reader;
}

Status PlanSampleReader::read(int64_t global, std::span<int32_t> out) const {
  thread_local std::vector<TokenRange> ranges;
  ranges.clear();
  const SampleRef ref = plan_->sample(split_, global);
  plan_->sample_ranges(split_, ref, ranges);
  const IndexedDataset& dataset = *datasets_[ref.source];
  size_t written = 0;
  for (const TokenRange& r : ranges) {
    const uint64_t length = static_cast<uint64_t>(dataset.sequence_length(r.sequence));
    if (r.offset > length || r.count > length - r.offset || written + r.count > out.size()) {
      return Corruption("plan '" + plan_->path() + "': sample " + std::to_string(global) +
                        " reads past sequence " + std::to_string(r.sequence) + " of '" +
                        dataset.prefix() + "'");
    }
    dataset.read_tokens(r.sequence, r.offset, r.count, out.data() + written);
    written += r.count;
  }
  return Status::OK();
}

size_t PlanSampleReader::open_datasets() const {
  size_t n = 0;
  for (const auto& d : datasets_) n += d.has_value() ? 1 : 0;
  return n;
}

}  // namespace ms::data
