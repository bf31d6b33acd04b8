// libFuzzer target for manifest.json (lib/ckpt/manifest.h) and the readers behind it: any text
// must either be refused with a Status or parse into a manifest that survives a round trip
// through to_json() unchanged, whose shards tile each tensor exactly, and which verify and the
// tensor catalog (diff, export) read beside a fixed 256-byte data file without allocating
// more than that file backs. Built with clang -fsanitize=fuzzer,address locally; CI replays
// tests/fuzz/corpus/manifest_json/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "ckpt/diff.h"
#include "ckpt/manifest.h"
#include "ckpt/verify.h"
#include "fuzz_scratch.h"
#include "io/env.h"

namespace {

// A checkpoints/ directory in the scratch dir with a step directory holding rank-00000.data.
std::string step_dir() {
  static const std::string dir = [] {
    std::string bin;
    for (int i = 0; i < 256; ++i) bin.push_back(static_cast<char>(i));
    ms::fuzz::write_scratch("rank-00000.data", bin);
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
  return 0;
}
