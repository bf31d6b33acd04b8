// Corpus readers: a byte source (plain file, or zstd stream over a byte-counting file), a line
// splitter over it, and one DocumentReader per format on top. Everything streams in 1 MiB
// pieces, so a multi-gigabyte .jsonl.zst never sits in memory whole.
#include "data/corpus.h"

#include <glob.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "io/zstd_stream.h"

namespace ms::data {
namespace {

constexpr size_t kReadChunk = 1 << 20;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

// Bytes of a corpus file as decoded text.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual Result<size_t> read(std::span<char> dest) = 0;
  virtual uint64_t consumed() const = 0;
};

class PlainSource final : public ByteSource {
 public:
  explicit PlainSource(std::unique_ptr<io::File> file) : file_(std::move(file)) {}
  Result<size_t> read(std::span<char> dest) override {
    MS_ASSIGN_OR_RETURN(size_t got, file_->read(std::as_writable_bytes(dest)));
    consumed_ += got;
    return got;
  }
  uint64_t consumed() const override { return consumed_; }

 private:
  std::unique_ptr<io::File> file_;
  uint64_t consumed_ = 0;
};

// A File that forwards reads and remembers how far into the file they reached, so progress of
// a compressed stream can be told in compressed bytes.
class CountingFile final : public io::File {
 public:
  explicit CountingFile(std::unique_ptr<io::File> inner)
      : io::File(inner->path(), 0), inner_(std::move(inner)) {}
  uint64_t high_water() const { return high_water_; }

 protected:
  Result<size_t> do_read_at(uint64_t offset, std::span<std::byte> dest) override {
    MS_ASSIGN_OR_RETURN(size_t got, inner_->read_at(offset, dest));
    high_water_ = std::max(high_water_, offset + got);
    return got;
  }
  Status do_write_at(uint64_t, std::span<const std::byte>) override {
    return FailedPrecondition(path() + ": corpus files are read-only");
  }
  Status do_sync() override { return inner_->sync(); }
  Result<uint64_t> do_size() override { return inner_->size(); }
  Status do_close() override { return inner_->close(); }

 private:
  std::unique_ptr<io::File> inner_;
  uint64_t high_water_ = 0;
};

class ZstdSource final : public ByteSource {
 public:
  explicit ZstdSource(std::unique_ptr<io::File> file)
      : file_(std::make_unique<CountingFile>(std::move(file))), reader_(*file_) {}
  Result<size_t> read(std::span<char> dest) override {
    return reader_.read(std::as_writable_bytes(dest));
  }
  uint64_t consumed() const override { return file_->high_water(); }

 private:
  std::unique_ptr<CountingFile> file_;
  io::ZstdReader reader_;
};

// Splits a ByteSource into lines. A line is returned without its '\n'; `had_newline` tells
// whether one ended it (only the last line of a file may lack it).
class LineSplitter {
 public:
  explicit LineSplitter(std::unique_ptr<ByteSource> source) : source_(std::move(source)) {}

  Result<bool> next(std::string* line, bool* had_newline) {
    line->clear();
    while (true) {
      const size_t newline = buffer_.find('\n', pos_);
      if (newline != std::string::npos) {
        line->append(buffer_, pos_, newline - pos_);
        pos_ = newline + 1;
        *had_newline = true;
        ++line_number_;
        return true;
      }
      line->append(buffer_, pos_, std::string::npos);
      MS_ASSIGN_OR_RETURN(bool more, refill());
      if (!more) {
        *had_newline = false;
        if (line->empty()) return false;
        ++line_number_;
        return true;
      }
    }
  }
  // Everything not yet returned, to the end of the source.
  Result<std::string> read_rest() {
    std::string out = buffer_.substr(pos_);
    while (true) {
      MS_ASSIGN_OR_RETURN(bool more, refill());
      if (!more) return out;
      out += buffer_;
    }
  }
  uint64_t line_number() const { return line_number_; }
  uint64_t consumed() const { return source_->consumed(); }

 private:
  Result<bool> refill() {
    buffer_.resize(kReadChunk);
    pos_ = 0;
    MS_ASSIGN_OR_RETURN(size_t got, source_->read(std::span<char>(buffer_.data(), buffer_.size())));
    buffer_.resize(got);
    return got > 0;
  }

  std::unique_ptr<ByteSource> source_;
  std::string buffer_;
  size_t pos_ = 0;
  uint64_t line_number_ = 0;
};

class TextReader final : public DocumentReader {
 public:
  TextReader(std::unique_ptr<ByteSource> source, TextSplit split)
      : lines_(std::move(source)), split_(split) {}

  Result<bool> next(std::string* text) override {
    switch (split_) {
      case TextSplit::kWholeFile: return next_whole_file(text);
      case TextSplit::kBlankLine: return next_paragraph(text);
      case TextSplit::kLine: return next_line(text);
    }
    return false;
  }
  uint64_t bytes_consumed() const override { return lines_.consumed(); }
  uint64_t skipped_lines() const override { return 0; }

 private:
  Result<bool> next_whole_file(std::string* text) {
    if (done_) return false;
    done_ = true;
    MS_ASSIGN_OR_RETURN(*text, lines_.read_rest());
    return true;
  }
  Result<bool> next_paragraph(std::string* text) {
    text->clear();
    std::string line;
    bool had_newline = false;
    while (true) {
      MS_ASSIGN_OR_RETURN(bool got, lines_.next(&line, &had_newline));
      if (!got) return !text->empty();
      if (is_blank(line)) {
        if (!text->empty()) return true;
        continue;
      }
      *text += line;
      if (had_newline) *text += '\n';
    }
  }
  Result<bool> next_line(std::string* text) {
    bool had_newline = false;
    while (true) {
      MS_ASSIGN_OR_RETURN(bool got, lines_.next(text, &had_newline));
      if (!got) return false;
      if (!text->empty()) return true;
    }
  }

  LineSplitter lines_;
  TextSplit split_;
  bool done_ = false;
};

class JsonlReader final : public DocumentReader {
 public:
  JsonlReader(std::unique_ptr<ByteSource> source, std::string path, CorpusOptions options)
      : lines_(std::move(source)), path_(std::move(path)), options_(std::move(options)) {}

  Result<bool> next(std::string* text) override {
    std::string line;
    bool had_newline = false;
    while (true) {
      MS_ASSIGN_OR_RETURN(bool got, lines_.next(&line, &had_newline));
      if (!got) return false;
      if (is_blank(line)) continue;
      Result<std::string> doc = parse_jsonl_document(line, options_.text_key);
      if (doc.ok()) {
        *text = std::move(doc).value();
        return true;
      }
      if (!options_.skip_bad_lines) {
        return InvalidArgument(path_ + ":" + std::to_string(lines_.line_number()) + ": " +
                               doc.status().message() +
                               " (fix the line, or pass --skip-bad-lines to skip and count such lines)");
      }
      ++skipped_;
    }
  }
  uint64_t bytes_consumed() const override { return lines_.consumed(); }
  uint64_t skipped_lines() const override { return skipped_; }

 private:
  LineSplitter lines_;
  std::string path_;
  CorpusOptions options_;
  uint64_t skipped_ = 0;
};

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

Status add_directory(io::Env& env, const std::string& dir, std::vector<std::string>* out) {
  MS_ASSIGN_OR_RETURN(std::vector<std::string> names, env.list_dir(dir));
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    if (env.is_directory(path)) {
      MS_RETURN_IF_ERROR(add_directory(env, path, out));
    } else if (corpus_format(path).ok()) {
      out->push_back(path);
    }
  }
  return Status::OK();
}

Status add_input(io::Env& env, const std::string& input, std::vector<std::string>* out) {
  if (env.is_directory(input)) {
    const size_t before = out->size();
    MS_RETURN_IF_ERROR(add_directory(env, input, out));
    if (out->size() == before) {
      return NotFound("directory '" + input + "' holds no .txt, .jsonl or .jsonl.zst files");
    }
    return Status::OK();
  }
  if (env.exists(input)) {
    MS_RETURN_IF_ERROR(corpus_format(input).status());
    out->push_back(input);
    return Status::OK();
  }
  if (!has_glob_chars(input)) return NotFound("input '" + input + "' does not exist");
  glob_t matches{};
  const int rc = ::glob(input.c_str(), 0, nullptr, &matches);
  std::vector<std::string> paths(matches.gl_pathv, matches.gl_pathv + (rc == 0 ? matches.gl_pathc : 0));
  globfree(&matches);
  if (paths.empty()) return NotFound("pattern '" + input + "' matches no file");
  std::sort(paths.begin(), paths.end());
  for (const std::string& path : paths) {
    if (env.is_directory(path)) {
      MS_RETURN_IF_ERROR(add_directory(env, path, out));
    } else if (corpus_format(path).ok()) {
      out->push_back(path);
    }
  }
  return Status::OK();
}

}  // namespace

Result<TextSplit> parse_text_split(std::string_view text) {
  if (text == "none") return TextSplit::kWholeFile;
  if (text == "blank-line") return TextSplit::kBlankLine;
  if (text == "line") return TextSplit::kLine;
  return InvalidArgument("unknown document separator '" + std::string(text) +
                         "' (choose none, blank-line or line)");
}

Result<CorpusFormat> corpus_format(const std::string& path) {
  if (ends_with(path, ".jsonl.zst")) return CorpusFormat::kJsonlZst;
  if (ends_with(path, ".jsonl")) return CorpusFormat::kJsonl;
  if (ends_with(path, ".txt") || ends_with(path, ".text")) return CorpusFormat::kText;
  return InvalidArgument("'" + path + "' is not a corpus file: expected .txt, .text, .jsonl or .jsonl.zst");
}

Result<std::vector<std::string>> expand_corpus_inputs(io::Env& env,
                                                      std::span<const std::string> inputs) {
  if (inputs.empty()) return InvalidArgument("no inputs given");
  std::vector<std::string> files;
  for (const std::string& input : inputs) MS_RETURN_IF_ERROR(add_input(env, input, &files));
  return files;
}

Result<std::unique_ptr<DocumentReader>> DocumentReader::open(io::Env& env, const std::string& path,
                                                             const CorpusOptions& options) {
  MS_ASSIGN_OR_RETURN(CorpusFormat format, corpus_format(path));
  MS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file, env.open(path, io::OpenMode::kRead));
  switch (format) {
    case CorpusFormat::kText:
      return std::unique_ptr<DocumentReader>(
          new TextReader(std::make_unique<PlainSource>(std::move(file)), options.text_split));
    case CorpusFormat::kJsonl:
      return std::unique_ptr<DocumentReader>(
          new JsonlReader(std::make_unique<PlainSource>(std::move(file)), path, options));
    case CorpusFormat::kJsonlZst:
      return std::unique_ptr<DocumentReader>(
          new JsonlReader(std::make_unique<ZstdSource>(std::move(file)), path, options));
  }
  return Internal("unhandled corpus format");
}

Result<std::string> parse_jsonl_document(std::string_view line, const std::string& text_key) {
  using nlohmann::json;
  json doc;
  try {
    doc = json::parse(line);
  } catch (const json::parse_error& e) {
    return InvalidArgument("malformed JSON at byte " + std::to_string(e.byte));
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    return InvalidArgument(std::string("unreadable JSON: ") + e.what());
  }
  if (!doc.is_object()) return InvalidArgument(std::string("expected a JSON object, got ") + doc.type_name());
  auto it = doc.find(text_key);
  if (it == doc.end()) return InvalidArgument("object has no key '" + text_key + "' (choose the field with --text-key)");
  if (!it->is_string()) return InvalidArgument("key '" + text_key + "' holds " + it->type_name() + ", not a string");
  return it->get<std::string>();
}

}  // namespace ms::data
