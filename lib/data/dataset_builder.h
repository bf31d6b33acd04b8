// `ms-data build`: corpus files -> tokenizer -> Megatron indexed dataset (+ .meta.json).
// Documents are read in input order and grouped into batches (a batch closes at
// batch_documents documents or batch_bytes bytes, so its boundaries depend on the input alone);
// a batch is tokenized on a thread pool, each document gets the end-of-document id appended,
// and the documents are written in input order, one sequence per document. A document with no
// tokens (empty text) is written as Megatron's preprocess_data.py writes it: a document with no
// sequence and no end-of-document id.
//
// Under MPI with R > 1 ranks every rank streams the whole input (parsing is cheap next to
// tokenizing) and tokenizes batch b when b % R == its rank, writing tokens to a part file beside
// the output; rank 0 then gathers the per-document lengths and concatenates the parts in batch
// order. The dataset is therefore byte-identical to a single-process build. Part files live next
// to the output, so the output directory must be on a filesystem all ranks share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "data/corpus.h"
#include "data/dataset_meta.h"
#include "data/tokenizer.h"
#include "io/env.h"

namespace ms::data {

enum class DTypeChoice { kAuto, kU16, kI32 };

// Parses "auto", "u16" or "i32".
Result<DTypeChoice> parse_dtype_choice(std::string_view text);

struct BuildOptions {
  std::vector<std::string> inputs;  // files, directories, globs (expand_corpus_inputs)
  std::string tokenizer_path;       // recorded in the sidecar
  std::string output_prefix;
  size_t threads = 1;               // tokenizer threads per rank
  CorpusOptions corpus;
  bool append_eos = true;
  DTypeChoice dtype = DTypeChoice::kAuto;
  size_t batch_documents = 1024;
  size_t batch_bytes = 4 << 20;
  bool show_progress = true;
  bool replace = false;             // existing <prefix>.bin/.idx/.meta.json may be replaced
};

struct BuildResult {
  DatasetMeta meta;          // as written to <prefix>.meta.json
  uint64_t text_bytes = 0;   // bytes of document text tokenized
  double seconds = 0.0;
};

// Builds the dataset. `comm` may be null (one process); otherwise every rank of `comm` must call
// this with the same options, and each returns the same outcome. Errors name the input file and
// line, the tokenizer or the output; on any error nothing is left under the output's final
// names (part and temporary files are removed). An output file that is, or lies inside, an
// input or the tokenizer is refused, and so is an existing one unless options.replace
// (io/output_path.h).
Result<BuildResult> build_dataset(io::Env& env, const Tokenizer& tokenizer,
                                  const BuildOptions& options, comm::Communicator* comm);

}  // namespace ms::data
