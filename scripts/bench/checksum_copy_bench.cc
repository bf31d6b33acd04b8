// The snapshot path's CPU kernels (core/crc32c.h, core/stream_copy.h) on one thread, over a
// buffer larger than the caches: CRC-32C as one hardware stream (fed in pieces below the
// interleaving threshold) and as crc32c() runs it (three interleaved streams), the software
// table, memcpy, the streaming copy, the streaming copy followed by a checksum pass, and the
// fused copy_streaming_crc32c. Each figure is the best of --reps runs, in GB/s of source bytes,
// beside STREAM copy (read + write counted) measured in the same run. Prints Markdown.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "core/crc32c.h"
#include "core/memory_bandwidth.h"
#include "core/stream_copy.h"
#include "core/timer.h"

namespace {

double best_gbs(size_t bytes, int reps, const std::function<void()>& fn) {
  fn();  // warm-up: pages faulted in, code paths picked
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const ms::Stopwatch clock;
    fn();
    best = std::min(best, clock.elapsed_s());
  }
  return static_cast<double>(bytes) / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("CRC-32C and snapshot copies against memory bandwidth, one thread");
  int64_t mib = 512;
  int reps = 5;
  app.add_option("--mib", mib, "Buffer size in MiB")->capture_default_str();
  app.add_option("--reps", reps, "Timed repetitions (the best is kept)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const size_t n = static_cast<size_t>(mib) << 20;
  std::vector<unsigned char> src(n), dst(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 131 + (i >> 12));
  const double copy_gbs = ms::measure_stream_gbs(ms::StreamKernel::kCopy, size_t{1} << 25, 5);
  std::printf("# %lld MiB, 1 thread; STREAM copy %.2f GB/s (read + write)\n\n",
              static_cast<long long>(mib), copy_gbs);
  std::printf("| kernel | GB/s of source | vs STREAM copy |\n|---|---:|---:|\n");
  uint32_t sink = 0;
  auto row = [&](const char* name, const std::function<void()>& fn) {
    const double gbs = best_gbs(n, reps, fn);
    std::printf("| %s | %.2f | %.2fx |\n", name, gbs, gbs / copy_gbs);
  };
  if (ms::crc32c_hardware_available()) {
    row("crc32c, one hardware stream", [&] {
      const size_t piece = ms::kCrc32cInterleaveBytes - 8;
      uint32_t crc = 0;
      for (size_t at = 0; at < n; at += piece) {
        crc = ms::crc32c_hardware(src.data() + at, std::min(piece, n - at), crc);
      }
      sink ^= crc;
    });
  }
  row("crc32c (interleaved when hardware)", [&] { sink ^= ms::crc32c(src.data(), n); });
  row("crc32c, software table", [&] { sink ^= ms::crc32c_software(src.data(), n); });
  row("memcpy", [&] { std::memcpy(dst.data(), src.data(), n); });
  row("copy_streaming", [&] { ms::copy_streaming(dst.data(), src.data(), n); });
  row("copy_streaming, then crc32c of the copy", [&] {
    ms::copy_streaming(dst.data(), src.data(), n);
    sink ^= ms::crc32c(dst.data(), n);
  });
  row("copy_streaming_crc32c (fused)", [&] {
    sink ^= ms::copy_streaming_crc32c(dst.data(), src.data(), n);
  });
  std::printf("\n# %08x (the checksums folded, so none is optimized away)\n", sink);
  return 0;
}
