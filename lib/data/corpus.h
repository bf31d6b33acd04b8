// Raw text corpora as a stream of documents, for `ms-data build` and tokenizer training.
//   .txt / .text   plain text. By default the whole file is one document; --doc-separator
//                  blank-line makes every run of non-blank lines a document (a single text such
//                  as Tiny Shakespeare becomes many), and `line` makes every non-empty line one.
//   .jsonl         one JSON object per line; the document is the string under `text_key`.
//   .jsonl.zst     the same, zstd-compressed, decompressed as it streams (lib/io ZstdReader).
// Inputs may be files, directories (searched recursively; entries in sorted order; files with
// other extensions skipped) and glob patterns (matches sorted), so the document order is
// reproducible. A malformed JSON line is an error naming the file and line, or is skipped and
// counted when skip_bad_lines is set.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace ms::data {

enum class CorpusFormat { kText, kJsonl, kJsonlZst };

enum class TextSplit {
  kWholeFile,  // "none": one document per file
  kBlankLine,  // "blank-line": runs of non-blank lines, each line kept with its newline
  kLine,       // "line": every non-empty line, without its newline
};

struct CorpusOptions {
  std::string text_key = "text";
  TextSplit text_split = TextSplit::kWholeFile;
  bool skip_bad_lines = false;
};

// Parses "none", "blank-line" or "line"; InvalidArgument listing the choices otherwise.
Result<TextSplit> parse_text_split(std::string_view text);

// The format implied by `path`'s extension; InvalidArgument naming the path when none applies.
Result<CorpusFormat> corpus_format(const std::string& path);

// Expands files, directories and glob patterns into the list of corpus files, in order:
// arguments in the given order, each directory's files sorted by path, each glob's matches
// sorted. NotFound for a path or pattern that matches nothing; InvalidArgument for a file named
// explicitly whose extension is not a corpus format.
Result<std::vector<std::string>> expand_corpus_inputs(io::Env& env,
                                                      std::span<const std::string> inputs);

// Reads one corpus file document by document. Not thread-safe; the Env must outlive it.
class DocumentReader {
 public:
  static Result<std::unique_ptr<DocumentReader>> open(io::Env& env, const std::string& path,
                                                      const CorpusOptions& options);
  virtual ~DocumentReader() = default;

  // Stores the next document in *text and returns true, or returns false at the end. Errors
  // name the file (and for JSON lines, the line number).
  virtual Result<bool> next(std::string* text) = 0;
  // Bytes consumed from the file as stored (compressed bytes for .jsonl.zst), for progress.
  virtual uint64_t bytes_consumed() const = 0;
  // Malformed lines skipped under skip_bad_lines.
  virtual uint64_t skipped_lines() const = 0;
};

// Extracts the document text of one JSON line: the string under `text_key` of a JSON object.
// InvalidArgument describing what is wrong (not JSON, not an object, key missing, not a string).
// Empty and whitespace-only lines are for the caller to skip.
Result<std::string> parse_jsonl_document(std::string_view line, const std::string& text_key);

}  // namespace ms::data
