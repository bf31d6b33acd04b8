// build_dataset: a CorpusStream yields batches of documents in input order, a thread pool
// tokenizes each batch, and the tokens go either straight to an IndexedDatasetWriter (one rank)
// or, under MPI, to this rank's part file, which rank 0 stitches together in batch order.
#include "data/dataset_builder.h"

#include <unistd.h>

#include <algorithm>
#include <memory>

#include "comm/agree.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "core/version.h"
#include "data/indexed_dataset.h"
#include "data/progress.h"
#include "io/output_path.h"

namespace ms::data {
namespace {

struct Batch {
  std::vector<std::string> texts;  // empty for batches another rank tokenizes
  std::vector<uint32_t> sources;   // source index of each document
  uint64_t bytes = 0;
};

// Every document of every input file, in order, grouped into batches.
class CorpusStream {
 public:
  CorpusStream(io::Env& env, std::vector<std::string> files, CorpusOptions options)
      : env_(env), files_(std::move(files)), options_(std::move(options)) {
    for (const std::string& f : files_) sources_.push_back(DatasetSource{.path = f});
  }

  Status measure_inputs() {
    for (DatasetSource& s : sources_) {
      MS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file, env_.open(s.path, io::OpenMode::kRead));
      MS_ASSIGN_OR_RETURN(s.bytes, file->size());
      total_bytes_ += s.bytes;
    }
    return Status::OK();
  }

  // Fills `batch` with the next documents; false when the input is exhausted. Texts are kept
  // only when `keep_text`.
  Result<bool> next_batch(Batch* batch, size_t max_documents, size_t max_bytes, bool keep_text) {
    *batch = Batch{};
    std::string text;
    while (batch->sources.size() < max_documents && batch->bytes < max_bytes) {
      MS_ASSIGN_OR_RETURN(bool got, next_document(&text));
      if (!got) break;
      batch->bytes += text.size();
      batch->sources.push_back(static_cast<uint32_t>(current_));
      if (keep_text) batch->texts.push_back(std::move(text));
    }
    return !batch->sources.empty();
  }

  uint64_t consumed_bytes() const {
    return finished_bytes_ + (reader_ ? reader_->bytes_consumed() : 0);
  }
  uint64_t total_bytes() const { return total_bytes_; }
  std::vector<DatasetSource>& sources() { return sources_; }

 private:
  Result<bool> next_document(std::string* text) {
    while (current_ < files_.size()) {
      if (!reader_) {
        MS_ASSIGN_OR_RETURN(reader_, DocumentReader::open(env_, files_[current_], options_));
      }
      MS_ASSIGN_OR_RETURN(bool got, reader_->next(text));
      if (got) {
        ++sources_[current_].documents;
        return true;
      }
      sources_[current_].skipped_lines = reader_->skipped_lines();
      finished_bytes_ += sources_[current_].bytes;
      reader_.reset();
      ++current_;
    }
    return false;
  }

  io::Env& env_;
  std::vector<std::string> files_;
  CorpusOptions options_;
  std::vector<DatasetSource> sources_;
  std::unique_ptr<DocumentReader> reader_;
  size_t current_ = 0;
  uint64_t total_bytes_ = 0;
  uint64_t finished_bytes_ = 0;
};

// Token ids of each document of `batch`, with `eos` appended when it is >= 0 and the document
// has tokens: like Megatron's preprocess_data.py, an empty text stays empty (no sequence, no
// end-of-document token).
std::vector<std::vector<int32_t>> tokenize_batch(const Tokenizer& tokenizer, const Batch& batch,
                                                 ThreadPool* pool, int32_t eos) {
  std::vector<std::vector<int32_t>> out(batch.texts.size());
  auto encode_range = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      out[i] = tokenizer.encode(batch.texts[i]);
      if (eos >= 0 && !out[i].empty()) out[i].push_back(eos);
    }
  };
  if (pool == nullptr) {
    encode_range(0, static_cast<int64_t>(out.size()));
  } else {
    pool->parallel_for(0, static_cast<int64_t>(out.size()), encode_range, 1);
  }
  return out;
}

Result<uint8_t> choose_dtype(DTypeChoice choice, int64_t vocab_size, const std::string& tok_path) {
  if (choice == DTypeChoice::kI32) return static_cast<uint8_t>(TokenDType::kI32);
  if (choice == DTypeChoice::kU16 && vocab_size > 65536) {
    return InvalidArgument("--dtype u16 cannot hold the " + std::to_string(vocab_size) +
                           " ids of tokenizer '" + tok_path + "' (u16 fits vocabularies up to 65536); use i32 or auto");
  }
  return dtype_code_for_vocab(vocab_size);
}

DatasetMeta describe_build(const Tokenizer& tokenizer, const BuildOptions& options) {
  DatasetMeta meta;
  meta.toolkit_version = version_string();
  meta.git_revision = std::string(git_revision());
  meta.tokenizer_path = options.tokenizer_path;
  meta.tokenizer_hash = tokenizer.content_hash();
  meta.tokenizer_kind = tokenizer.kind();
  meta.vocab_size = tokenizer.vocab_size();
  meta.eos_id = tokenizer.eos_id();
  meta.append_eos = options.append_eos;
  return meta;
}

// State of one build on one rank.
class Builder {
 public:
  Builder(io::Env& env, const Tokenizer& tokenizer, const BuildOptions& options,
          comm::Communicator* comm)
      : env_(env), tokenizer_(tokenizer), options_(options), comm_(comm),
        rank_(comm ? comm->rank() : 0), ranks_(comm ? comm->size() : 1) {}

  Result<BuildResult> run();

 private:
  Status prepare(std::vector<std::string>* files);
  Status stream_batches(CorpusStream& stream);
  Status write_own_batch(const Batch& batch);
  Status agree(const Status& local, std::string_view what);
  Status gather_and_stitch();
  Status stitch(const std::vector<int64_t>& all_lengths, const std::vector<size_t>& offsets);
  std::string part_path(int rank) const {
    return options_.output_prefix + ".part-" + std::to_string(rank) + ".tmp";
  }

  io::Env& env_;
  const Tokenizer& tokenizer_;
  const BuildOptions& options_;
  comm::Communicator* comm_;
  int rank_;
  int ranks_;
  uint8_t dtype_code_ = 0;
  int32_t eos_ = -1;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<IndexedDatasetWriter> writer_;  // rank 0 only
  std::unique_ptr<io::File> part_;                // MPI builds: this rank's tokens, as i32
  std::vector<int64_t> own_lengths_;              // MPI builds: tokens per own document
  std::vector<size_t> batch_sizes_;               // documents per batch, every batch
  std::vector<int64_t> source_tokens_;            // tokens per source, own documents
  uint64_t sequences_ = 0;                        // non-empty documents (all ranks' once gathered)
  uint64_t text_bytes_ = 0;
  DatasetMeta meta_;
};

// The three files of the output prefix, each checked against every input: the expanded corpus
// files, the directories and patterns given, and the tokenizer.
Status check_outputs(io::Env& env, const BuildOptions& options,
                     const std::vector<std::string>& files) {
  io::OutputRules rules{files, "--output", options.replace};
  rules.inputs.insert(rules.inputs.end(), options.inputs.begin(), options.inputs.end());
  rules.inputs.push_back(options.tokenizer_path);
  for (const char* suffix : {".bin", ".idx", ".meta.json"}) {
    MS_RETURN_IF_ERROR(io::check_output_file(env, options.output_prefix + suffix, rules));
  }
  return Status::OK();
}

Status Builder::prepare(std::vector<std::string>* files) {
  MS_ASSIGN_OR_RETURN(*files, expand_corpus_inputs(env_, options_.inputs));
  MS_RETURN_IF_ERROR(check_outputs(env_, options_, *files));
  // A prefix in a directory that does not exist yet is a new dataset there, as a new run.dir is
  // a new run: every rank may create it (its part file lives there too).
  MS_RETURN_IF_ERROR(env_.create_dirs(io::parent_dir(options_.output_prefix)));
  MS_ASSIGN_OR_RETURN(dtype_code_, choose_dtype(options_.dtype, tokenizer_.vocab_size(), options_.tokenizer_path));
  if (options_.append_eos) {
    eos_ = tokenizer_.eos_id();
    if (eos_ < 0) {
      return InvalidArgument("tokenizer '" + options_.tokenizer_path +
                             "' has no end-of-document token; pass --append-eos=false");
    }
  }
  if (options_.threads > 1) pool_ = std::make_unique<ThreadPool>(options_.threads);
  source_tokens_.assign(files->size(), 0);
  meta_ = describe_build(tokenizer_, options_);
  if (rank_ == 0) {
    MS_ASSIGN_OR_RETURN(writer_, IndexedDatasetWriter::create(env_, options_.output_prefix, dtype_code_));
  }
  if (ranks_ > 1) {
    MS_ASSIGN_OR_RETURN(part_, env_.open(part_path(rank_), io::OpenMode::kTruncate));
  }
  return Status::OK();
}

Status Builder::write_own_batch(const Batch& batch) {
  std::vector<std::vector<int32_t>> tokens = tokenize_batch(tokenizer_, batch, pool_.get(), eos_);
  for (size_t i = 0; i < tokens.size(); ++i) {
    source_tokens_[batch.sources[i]] += static_cast<int64_t>(tokens[i].size());
    text_bytes_ += batch.texts[i].size();
    sequences_ += tokens[i].empty() ? 0 : 1;
    if (ranks_ == 1) {
      MS_RETURN_IF_ERROR(writer_->add_document(tokens[i]));
    } else {
      own_lengths_.push_back(static_cast<int64_t>(tokens[i].size()));
      MS_RETURN_IF_ERROR(part_->append(std::as_bytes(std::span<const int32_t>(tokens[i]))));
    }
  }
  return Status::OK();
}

Status Builder::stream_batches(CorpusStream& stream) {
  MS_RETURN_IF_ERROR(stream.measure_inputs());
  std::unique_ptr<Progress> progress;
  if (options_.show_progress) {
    progress = std::make_unique<Progress>("build " + options_.output_prefix, stream.total_bytes());
  }
  Batch batch;
  uint64_t own_tokens = 0;
  for (size_t b = 0;; ++b) {
    const bool mine = static_cast<int>(b % static_cast<size_t>(ranks_)) == rank_;
    MS_ASSIGN_OR_RETURN(bool got, stream.next_batch(&batch, options_.batch_documents, options_.batch_bytes, mine));
    if (!got) break;
    batch_sizes_.push_back(batch.sources.size());
    if (mine) MS_RETURN_IF_ERROR(write_own_batch(batch));
    if (progress) {
      own_tokens = 0;
      for (int64_t t : source_tokens_) own_tokens += static_cast<uint64_t>(t);
      progress->update(stream.consumed_bytes(), std::to_string(own_tokens) + " tokens");
    }
  }
  if (progress) progress->finish(std::to_string(own_tokens) + " tokens");
  return Status::OK();
}

// comm::agree over the ranks of the build; a build without a communicator is one rank.
Status Builder::agree(const Status& local, std::string_view what) {
  return comm_ == nullptr ? local : comm::agree(*comm_, local, what);
}

Status Builder::stitch(const std::vector<int64_t>& all_lengths, const std::vector<size_t>& offsets) {
  std::vector<std::unique_ptr<io::File>> parts;
  for (int r = 0; r < ranks_; ++r) {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> f, env_.open(part_path(r), io::OpenMode::kRead));
    parts.push_back(std::move(f));
  }
  std::vector<size_t> next_doc(offsets.begin(), offsets.end() - 1);
  std::vector<uint64_t> read_at(ranks_, 0);
  std::vector<int32_t> tokens;
  for (size_t b = 0; b < batch_sizes_.size(); ++b) {
    const size_t owner = b % static_cast<size_t>(ranks_);
    for (size_t d = 0; d < batch_sizes_[b]; ++d) {
      tokens.resize(static_cast<size_t>(all_lengths[next_doc[owner]++]));
      std::span<std::byte> dest = std::as_writable_bytes(std::span<int32_t>(tokens));
      MS_ASSIGN_OR_RETURN(size_t got, parts[owner]->read_at(read_at[owner], dest));
      if (got != dest.size()) return Corruption(part_path(static_cast<int>(owner)) + ": shorter than its document lengths");
      read_at[owner] += got;
      MS_RETURN_IF_ERROR(writer_->add_document(tokens));
    }
  }
  return Status::OK();
}

Status Builder::gather_and_stitch() {
  MS_RETURN_IF_ERROR(part_->sync());
  MS_RETURN_IF_ERROR(part_->close());
  std::vector<int64_t> counts(ranks_);
  const int64_t mine = static_cast<int64_t>(own_lengths_.size());
  MS_RETURN_IF_ERROR(comm_->allgather(&mine, counts.data(), 1, DType::kI64));
  std::vector<size_t> recv_counts(counts.begin(), counts.end());
  std::vector<size_t> offsets(ranks_ + 1, 0);
  for (int r = 0; r < ranks_; ++r) offsets[r + 1] = offsets[r] + recv_counts[r];
  std::vector<int64_t> all_lengths(offsets.back());
  MS_RETURN_IF_ERROR(comm_->allgatherv(own_lengths_.data(), own_lengths_.size(), all_lengths.data(), recv_counts, DType::kI64));
  sequences_ = static_cast<uint64_t>(std::count_if(all_lengths.begin(), all_lengths.end(),
                                                   [](int64_t length) { return length > 0; }));
  std::vector<int64_t> totals(source_tokens_.size());
  MS_RETURN_IF_ERROR(comm_->allreduce(source_tokens_.data(), totals.data(), totals.size(), DType::kI64, comm::ReduceOp::kSum));
  source_tokens_ = totals;
  uint64_t bytes = text_bytes_;
  MS_RETURN_IF_ERROR(comm_->allreduce(&text_bytes_, &bytes, 1, DType::kI64, comm::ReduceOp::kSum));
  text_bytes_ = bytes;
  return rank_ == 0 ? stitch(all_lengths, offsets) : Status::OK();
}

Result<BuildResult> Builder::run() {
  Stopwatch clock;
  std::vector<std::string> files;
  MS_RETURN_IF_ERROR(agree(prepare(&files), "preparing the build"));
  CorpusStream stream(env_, files, options_.corpus);
  MS_RETURN_IF_ERROR(agree(stream_batches(stream), "tokenizing the input"));
  if (ranks_ > 1) MS_RETURN_IF_ERROR(agree(gather_and_stitch(), "stitching the ranks' parts"));
  for (size_t s = 0; s < stream.sources().size(); ++s) {
    stream.sources()[s].tokens = static_cast<uint64_t>(source_tokens_[s]);
  }
  meta_.sources = stream.sources();
  Status committed = rank_ == 0 ? writer_->finish(meta_) : Status::OK();
  if (ranks_ > 1) (void)env_.remove_file(part_path(rank_));
  MS_RETURN_IF_ERROR(agree(committed, "committing the dataset"));
  BuildResult result;
  result.meta = meta_;
  result.meta.dtype = dtype_code_name(dtype_code_);
  result.meta.documents = 0;
  result.meta.tokens = 0;
  for (const DatasetSource& s : meta_.sources) {
    result.meta.documents += s.documents;
    result.meta.tokens += s.tokens;
  }
  result.meta.sequences = sequences_;
  result.text_bytes = text_bytes_;
  result.seconds = clock.elapsed_s();
  return result;
}

}  // namespace

Result<DTypeChoice> parse_dtype_choice(std::string_view text) {
  if (text == "auto") return DTypeChoice::kAuto;
  if (text == "u16") return DTypeChoice::kU16;
  if (text == "i32") return DTypeChoice::kI32;
  return InvalidArgument("unknown dtype '" + std::string(text) + "' (choose auto, u16 or i32)");
}

Result<BuildResult> build_dataset(io::Env& env, const Tokenizer& tokenizer,
                                  const BuildOptions& options, comm::Communicator* comm) {
  Builder builder(env, tokenizer, options, comm);
  Result<BuildResult> result = builder.run();
  if (!result.ok() && comm != nullptr && comm->size() > 1) {
    (void)env.remove_file(options.output_prefix + ".part-" + std::to_string(comm->rank()) + ".tmp");
  }
  return result;
}

}  // namespace ms::data
