// libFuzzer target for manifest.json (lib/ckpt/manifest.h) and the readers behind it: any text
// must either be refused with a Status or parse into a manifest that survives a round trip
// through to_json() unchanged, and which verify and the tensor catalog (diff, export) read
// beside fixed data files without allocating more than those files back. The data files are a
// 256-byte ramp (rank-00000.data) and three zstd frames made at start-up: a streamed 1 MiB of
// zeros with no content size (bomb.zst), a frame claiming 4800 bytes (claim.zst) and one of 24
// bytes (short.zst). Each input is read twice: as given, and with every shard's crc32c (and,
// for the .zst files, its offset and length) rewritten to match the file, so mutations get
// past the checksums into decompression and copying. Built with clang -fsanitize=fuzzer,address
// locally; CI replays tests/fuzz/corpus/manifest_json/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "ckpt/diff.h"
#include "ckpt/manifest.h"
#include "ckpt/verify.h"
#include "core/crc32c.h"
#include "fuzz_scratch.h"
#include "io/atomic_file.h"
#include "io/env.h"
#include "io/zstd_stream.h"

namespace {

// A 1 MiB stream of zeros written in pieces, so its frame records no content size.
std::string streamed_zeros() {
  const std::string path = ms::fuzz::scratch_dir() + "/bomb.tmp";
  {
    auto file = ms::io::default_env().open(path, ms::io::OpenMode::kTruncate);
    if (!file.ok()) std::abort();
    ms::io::ZstdWriter writer(**file);
    const std::string zeros(64 << 10, '\0');
    for (int i = 0; i < 16; ++i) {
      if (!writer.write(zeros).ok()) std::abort();
    }
    if (!writer.finish().ok() || !(*file)->close().ok()) std::abort();
  }
  return ms::io::read_file(path).value();
}

// The scratch directory as a step directory with its data files (made once).
std::string step_dir() {
  static const std::string dir = [] {
    std::string ramp;
    for (int i = 0; i < 256; ++i) ramp.push_back(static_cast<char>(i));
    ms::fuzz::write_scratch("rank-00000.data", ramp);
    ms::fuzz::write_scratch("bomb.zst", streamed_zeros());
    ms::fuzz::write_scratch("claim.zst", ms::io::compress(std::string(4800, 'x')));
    ms::fuzz::write_scratch("short.zst", ms::io::compress(std::string(24, 'y')));
    return ms::fuzz::scratch_dir();
  }();
  return dir;
}

void read_through_the_readers(const std::string& text) {
  ms::fuzz::write_scratch("manifest.json", text);
  ms::io::Env& env = ms::io::default_env();
  (void)ms::ckpt::verify_checkpoint(step_dir(), env);
  ms::Result<ms::ckpt::OpenedCatalog> opened = ms::ckpt::open_tensor_catalog(step_dir(), env);
  if (!opened.ok()) return;
  for (const ms::ckpt::TensorInfo& t : opened->catalog.tensors) (void)opened->catalog.read(t.name);
}

// The manifest with each shard's checksum matching its file's bytes (a .zst file's shard
// covering the whole file), where the range lies in the file.
std::string with_matching_checksums(ms::ckpt::Manifest m) {
  for (ms::ckpt::TensorRecord& t : m.tensors) {
    for (ms::ckpt::ShardRecord& s : t.shards) {
      ms::Result<std::string> bytes = ms::io::read_file(step_dir() + "/" + s.file);
      if (!bytes.ok()) continue;
      if (s.file.ends_with(".zst")) {
        s.offset = 0;
        s.length = bytes->size();
      }
      if (s.offset > bytes->size() || s.length > bytes->size() - s.offset) continue;
      s.crc32c = ms::crc32c(bytes->data() + s.offset, s.length);
    }
  }
  return m.to_json().dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ms::Result<ms::ckpt::Manifest> m = ms::ckpt::Manifest::parse(text, "fuzz/manifest.json");
  if (m.ok()) {
    // What was accepted writes back to something that reads back the same.
    ms::Result<ms::ckpt::Manifest> again =
        ms::ckpt::Manifest::parse(m->to_json().dump(), "fuzz/again.json");
    if (!again.ok() || again->tensors != m->tensors || again->step != m->step) std::abort();
    for (const ms::ckpt::TensorRecord& t : m->tensors) {
      if (m->find(t.name) != &t) std::abort();
    }
  }
  read_through_the_readers(text);
  if (m.ok()) read_through_the_readers(with_matching_checksums(std::move(*m)));
  return 0;
}
