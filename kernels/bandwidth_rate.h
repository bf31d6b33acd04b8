// Memory bandwidth probes of the current GPU for `ms-diagnose check`: device memory read (the
// reduction kernels::sum over a buffer), device-to-device copy, and host-to-device and
// device-to-host copies from pinned host memory. Each is the best of `reps` timed runs after
// one untimed run, in GB/s (1e9 bytes/s). No CUDA types appear here, so CPU-only code (lib/diag)
// can include it.
#pragma once

#include <cstddef>

#include "core/status.h"

namespace ms::kernels {

// Reads a `bytes` buffer once (bytes rounded down to whole floats).
Result<double> measure_device_read_gbs(size_t bytes, int reps);
// Copies `bytes` between two device buffers; counts 2 x bytes (read + write), as STREAM copy
// and core/memory_bandwidth.h do.
Result<double> measure_device_copy_gbs(size_t bytes, int reps);
// Copies `bytes` from pinned host memory to the device, and back.
Result<double> measure_host_to_device_gbs(size_t bytes, int reps);
Result<double> measure_device_to_host_gbs(size_t bytes, int reps);

}  // namespace ms::kernels
