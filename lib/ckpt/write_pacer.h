// Pacing of a checkpoint's background writes (issue 21, item 2): an asynchronous save competes
// with training for CPU time and memory bandwidth, so its writer can be held to a byte rate
// (`checkpoint.max_write_mbps`). The pacer is pure arithmetic over a clock the caller passes
// in, so its decisions are testable without timing anything.
#pragma once

#include <cstdint>

namespace ms::ckpt {

class WritePacer {
 public:
  // max_bytes_per_s <= 0: unpaced (every wait is 0). start_s: when the writes begin.
  WritePacer(double max_bytes_per_s, double start_s)
      : rate_(max_bytes_per_s), start_s_(start_s) {}

  // After `bytes` more were written by time now_s: how long to sleep so that the bytes written
  // since the start do not exceed the rate (0 when on or behind schedule).
  double wait_after(uint64_t bytes, double now_s) {
    written_ += bytes;
    if (rate_ <= 0) return 0;
    const double due = start_s_ + static_cast<double>(written_) / rate_;
    return due > now_s ? due - now_s : 0;
  }

  bool paced() const { return rate_ > 0; }
  // Pieces writes are cut into so the pace holds within about 50 ms at the rate (at least
  // 1 MiB, at most 8 MiB; 8 MiB unpaced). The pieces go to io::BulkWriter, whose writer
  // thread keeps the disk busy with one while the next is formed; a large piece would leave
  // the disk idle for the whole of its copy.
  uint64_t chunk_bytes() const {
    constexpr uint64_t kMax = 8ull << 20;
    if (rate_ <= 0) return kMax;
    const double c = rate_ * 0.05;
    if (c < double(1 << 20)) return 1 << 20;
    return c > double(kMax) ? kMax : static_cast<uint64_t>(c);
  }

 private:
  double rate_;
  double start_s_;
  uint64_t written_ = 0;
};

}  // namespace ms::ckpt
