// `ms-data tokenizer train|encode|decode`: learn a byte-level BPE from corpora and write it as
// tokenizer.json, and quick shell checks of any supported tokenizer (docs/tokenizer.md).
#include "cmd/common/registry.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "core/logging.h"
#include "core/timer.h"
#include "data/bpe_trainer.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "io/atomic_file.h"
#include "io/output_path.h"

namespace ms::data_cmd {
namespace {

struct TrainArgs {
  std::vector<std::string> inputs;
  std::string output;
  int32_t vocab_size = 8192;
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
  std::string text_field = "text";
  std::string pattern = "gpt2";
  int64_t min_frequency = 2;
};

struct CodecArgs {
  std::string tokenizer;
  std::string tiktoken_encoding;
  std::string text;
  bool text_given = false;
  std::string ids;
  std::string format = "json";
  bool no_special = false;
};

Result<std::unique_ptr<data::Tokenizer>> load_tokenizer(const CodecArgs& a) {
  data::TokenizerLoadOptions options;
  options.tiktoken_encoding = a.tiktoken_encoding;
  return data::Tokenizer::load(a.tokenizer, options);
}

Status feed_corpus(const TrainArgs& a, data::BpeTrainer& trainer, int64_t* documents) {
  MS_ASSIGN_OR_RETURN(std::vector<std::string> files, data::expand_corpus_inputs(io::default_env(), a.inputs));
  io::OutputRules rules{files, "--output"};
  rules.inputs.insert(rules.inputs.end(), a.inputs.begin(), a.inputs.end());
  MS_RETURN_IF_ERROR(io::check_output_is_not_an_input(a.output, rules));
  data::CorpusOptions options;
  options.text_key = a.text_field;
  for (const std::string& file : files) {
    MS_ASSIGN_OR_RETURN(auto reader, data::DocumentReader::open(io::default_env(), file, options));
    std::string text;
    while (true) {
      MS_ASSIGN_OR_RETURN(bool more, reader->next(&text));
      if (!more) break;
      trainer.add_text(text);
      ++*documents;
    }
  }
  return Status::OK();
}

Result<int> run_train(const TrainArgs& a) {
  data::BpeTrainerOptions options;
  options.vocab_size = a.vocab_size;
  options.special_tokens = a.special_tokens;
  options.split_pattern = a.pattern;
  options.min_frequency = a.min_frequency;
  MS_ASSIGN_OR_RETURN(auto trainer, data::BpeTrainer::create(options));
  Stopwatch watch;
  int64_t documents = 0;
  MS_RETURN_IF_ERROR(feed_corpus(a, *trainer, &documents));
  MS_LOG(Info) << "counted " << trainer->distinct_pieces() << " distinct pieces in " << documents
               << " documents in " << watch.elapsed_s() << " s";
  const data::TrainedBpe bpe = trainer->train();
  MS_RETURN_IF_ERROR(io::write_file_atomic(a.output, data::trained_bpe_to_json(bpe)));
  const size_t vocab = bpe.tokens.size() + bpe.special_tokens.size();
  MS_LOG(Info) << "learned " << bpe.merges.size() << " merges, vocabulary " << vocab << " in "
               << watch.elapsed_s() << " s; wrote " << a.output;
  if (vocab < static_cast<size_t>(a.vocab_size)) {
    MS_LOG(Warn) << "vocabulary stopped at " << vocab << " of " << a.vocab_size
                 << ": no pair occurs --min-frequency " << a.min_frequency << " times";
  }
  return 0;
}

// All of stdin, read in large blocks: a character at a time through std::cin (synchronised with
// stdio) took a tenth of encoding 3 MB (docs/bench/tokenizer.md, "The whole command").
// All of stdin. Read with read(2) straight into the string, sized up front when stdin is a
// regular file (a redirect), so that a large input is neither copied through stdio's buffer nor
// reallocated as it grows.
Result<std::string> read_stdin() {
  std::string text;
  struct stat st {};
  if (::fstat(STDIN_FILENO, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    text.reserve(static_cast<size_t>(st.st_size) + 1);
  }
  constexpr size_t kBlock = size_t{1} << 20;
  for (;;) {
    const size_t have = text.size();
    const size_t want = std::max(kBlock, text.capacity() - have);
    text.resize(have + want);
    const ssize_t got = ::read(STDIN_FILENO, text.data() + have, want);
    if (got < 0 && errno == EINTR) {
      text.resize(have);
      continue;
    }
    if (got < 0) return Internal("reading the text from stdin failed: " + std::string(std::strerror(errno)));
    text.resize(have + static_cast<size_t>(got));
    if (got == 0) break;
  }
  return text;
}

// Writes the ids one per line ("lines") or as one JSON array to stdout, formatted into a
// 64 KiB buffer at a time: one write per buffer, without holding the whole output in memory.
Status write_ids(const std::vector<int32_t>& ids, bool lines) {
  constexpr size_t kFlushAt = size_t{64} << 10;
  std::string out;
  out.reserve(kFlushAt + 32);
  const auto flush = [&] {
    const bool ok = std::fwrite(out.data(), 1, out.size(), stdout) == out.size();
    out.clear();
    return ok;
  };
  char digits[16];
  if (!lines) out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!lines && i > 0) out += ',';
    const auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), ids[i]);
    out.append(digits, end);
    if (lines) out += '\n';
    if (out.size() >= kFlushAt && !flush()) return Internal("writing the token ids to stdout failed");
  }
  if (!lines) out += "]\n";
  if (!flush() || std::fflush(stdout) != 0) return Internal("writing the token ids to stdout failed");
  return Status::OK();
}

Result<int> run_encode(const CodecArgs& a) {
  MS_ASSIGN_OR_RETURN(auto tokenizer, load_tokenizer(a));
  std::string text = a.text;
  if (!a.text_given) {
    MS_ASSIGN_OR_RETURN(text, read_stdin());
  }
  const std::vector<int32_t> ids = tokenizer->encode(text, !a.no_special);
  MS_RETURN_IF_ERROR(write_ids(ids, a.format == "lines"));
  return 0;
}

// Ids from a JSON array ("[1, 2]") or from numbers separated by spaces, commas or newlines.
Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::string cleaned = text;
  for (char& c : cleaned) {
    if (c == '[' || c == ']' || c == ',') c = ' ';
  }
  std::istringstream in(cleaned);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || value < INT32_MIN || value > INT32_MAX) {
      return InvalidArgument("'" + word + "' is not a token id (give integers, e.g. [15496, 995])");
    }
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

Result<int> run_decode(const CodecArgs& a) {
  MS_ASSIGN_OR_RETURN(auto tokenizer, load_tokenizer(a));
  std::string text = a.ids;
  if (text.empty()) {
    MS_ASSIGN_OR_RETURN(text, read_stdin());
  }
  MS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, parse_ids(text));
  MS_ASSIGN_OR_RETURN(std::string decoded, tokenizer->decode(ids));
  std::cout << decoded;
  if (a.format != "raw") std::cout << "\n";
  return 0;
}

void add_tokenizer_option(CLI::App* sub, CodecArgs& a) {
  sub->add_option("--tokenizer", a.tokenizer, "tokenizer.json or .tiktoken rank file")->required();
  sub->add_option("--tiktoken-encoding", a.tiktoken_encoding,
                  "Named encoding of a .tiktoken file: gpt2, r50k_base, p50k_base, cl100k_base, "
                  "o200k_base (default: from the file name, else gpt2)");
}

void add_train(CLI::App* parent, TrainArgs& a) {
  CLI::App* sub = parent->add_subcommand("train", "Learn a byte-level BPE and write tokenizer.json");
  sub->add_option("--input", a.inputs, "Corpus files, directories or globs (.txt, .jsonl, .jsonl.zst)")->required();
  sub->add_option("--output", a.output, "tokenizer.json to write (atomically)")->required();
  sub->add_option("--vocab-size", a.vocab_size, "Vocabulary size, bytes and special tokens included")
      ->capture_default_str();
  sub->add_option("--special", a.special_tokens, "Special tokens, given the last ids (repeatable)")
      ->capture_default_str();
  sub->add_option("--text-field", a.text_field, "Key of the document text in .jsonl lines")->capture_default_str();
  sub->add_option("--pattern", a.pattern, "Pre-split regex: gpt2, cl100k_base, llama3, o200k_base")
      ->capture_default_str();
  sub->add_option("--min-frequency", a.min_frequency, "Stop when the best pair occurs fewer times")
      ->capture_default_str();
}

void add_tokenizer_command(cli::Tool& tool) {
  auto train = std::make_shared<TrainArgs>();
  auto encode = std::make_shared<CodecArgs>();
  auto decode = std::make_shared<CodecArgs>();
  decode->format = "text";
  auto parent_holder = std::make_shared<CLI::App*>(nullptr);  // set below; the action runs later
  CLI::App* parent = tool.add_subcommand(
      "tokenizer", "Train a byte-level BPE tokenizer, or encode/decode text with one",
      [parent_holder, train, encode, decode]() -> Result<int> {
        CLI::App* self = *parent_holder;
        if (self->got_subcommand("train")) return run_train(*train);
        if (self->got_subcommand("encode")) return run_encode(*encode);
        return run_decode(*decode);
      });
  *parent_holder = parent;
  parent->require_subcommand(1, 1);
  add_train(parent, *train);

  CLI::App* enc = parent->add_subcommand("encode", "Print the token ids of text (--text or stdin)");
  add_tokenizer_option(enc, *encode);
  enc->add_option("--text", encode->text, "Text to encode (default: all of stdin)")
      ->each([e = encode.get()](const std::string&) { e->text_given = true; });
  enc->add_option("--format", encode->format, "json (one array) or lines (one id per line)")
      ->check(CLI::IsMember({"json", "lines"}))
      ->capture_default_str();
  enc->add_flag("--no-special", encode->no_special, "Encode special-token text as ordinary text");

  CLI::App* dec = parent->add_subcommand("decode", "Print the text of token ids (--ids or stdin)");
  add_tokenizer_option(dec, *decode);
  dec->add_option("--ids", decode->ids, "Ids as a JSON array or separated by spaces/commas (default: stdin)");
  dec->add_option("--format", decode->format, "text (ends with a newline) or raw (exact bytes)")
      ->check(CLI::IsMember({"text", "raw"}))
      ->capture_default_str();
}

}  // namespace

MS_CLI_COMMAND(tokenizer, add_tokenizer_command);

}  // namespace ms::data_cmd
