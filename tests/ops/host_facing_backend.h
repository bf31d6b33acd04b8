// A test adapter that lets the backend table (backend_cases.h) run a device backend on host
// buffers: each op copies its float inputs to the device backend's memory, calls the op there,
// and copies what it wrote back. Sizes come from each op's arguments, as its header documents.
// Host-side arguments of the seam (ids, masks, positions, rows, routing, tables) pass through
// unchanged: the device backend takes them from the host itself.
//
// Wrapped around the CPU backend it must reproduce lib/ops bit for bit (the table checks that on
// every build, which checks the adapter's sizes); wrapped around the CUDA backend it is how the
// table reaches the GPU.
#pragma once

#include <memory>

#include "ops/backend.h"

namespace ms::ops {

std::unique_ptr<Backend> host_facing(Backend& device);

}  // namespace ms::ops
