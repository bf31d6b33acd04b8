// ms_tokenizer_bench: tokenizer encoding throughput, MB/s and MB/s per core, for 1 and 2 threads
// (or the list given). The text is cut into documents of about 4 KiB at line ends, encoded with
// encode_batch; each setting runs `repeats` times and the best is reported (the first run also
// fills the piece cache, as a long build would). Prints nccl-tests-style rows and a JSON line.
//
//   ms_tokenizer_bench [tokenizer.json] [text file] [repeats] [threads...]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/timer.h"
#include "data/tokenizer.h"
#include "io/atomic_file.h"

namespace {

std::vector<std::string> split_documents(const std::string& text, size_t target_bytes) {
  std::vector<std::string> docs;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = std::min(text.size(), begin + target_bytes);
    const size_t newline = text.find('\n', end);
    end = newline == std::string::npos ? text.size() : newline + 1;
    docs.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return docs;
}

struct Measurement {
  double seconds;
  size_t tokens;
};

Measurement best_of(const ms::data::Tokenizer& tok, const std::vector<std::string>& docs,
                    int threads, int repeats) {
  Measurement best{1e30, 0};
  for (int r = 0; r < repeats; ++r) {
    ms::Stopwatch watch;
    const auto ids = ms::data::encode_batch(tok, docs, threads);
    const double s = watch.elapsed_s();
    size_t tokens = 0;
    for (const auto& d : ids) tokens += d.size();
    if (s < best.seconds) best = {s, tokens};
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string tok_path = argc > 1 ? argv[1] : "data/tokenizers/gpt2/tokenizer.json";
  const std::string text_path = argc > 2 ? argv[2] : "/work/shared/data/tinyshakespeare.txt";
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
  std::vector<int> thread_counts;
  for (int i = 4; i < argc; ++i) thread_counts.push_back(std::atoi(argv[i]));
  if (thread_counts.empty()) thread_counts = {1, 2};

  auto tok = ms::data::Tokenizer::load(tok_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "ms_tokenizer_bench: error: %s\n", tok.status().message().c_str());
    return 1;
  }
  auto text = ms::io::read_file(text_path);
  if (!text.ok()) {
    std::fprintf(stderr, "ms_tokenizer_bench: error: %s\n", text.status().message().c_str());
    return 1;
  }
  const std::vector<std::string> docs = split_documents(*text, 4096);
  const double mb = static_cast<double>(text->size()) / 1e6;
  std::printf("# ms_tokenizer_bench: %s (%s), %s: %.3f MB in %zu documents, best of %d\n",
              tok_path.c_str(), (*tok)->kind().c_str(), text_path.c_str(), mb, docs.size(), repeats);
  std::printf("# %7s %10s %10s %12s %14s\n", "threads", "tokens", "time_s", "MB/s", "MB/s/core");
  for (int threads : thread_counts) {
    const Measurement m = best_of(**tok, docs, threads, repeats);
    const double rate = mb / m.seconds;
    std::printf("  %7d %10zu %10.4f %12.2f %14.2f\n", threads, m.tokens, m.seconds, rate, rate / threads);
    std::printf("{\"impl\":\"ms\",\"threads\":%d,\"tokens\":%zu,\"seconds\":%.6f,\"mb_per_s\":%.3f,"
                "\"mb_per_s_per_core\":%.3f}\n",
                threads, m.tokens, m.seconds, rate, rate / threads);
  }
  return 0;
}
