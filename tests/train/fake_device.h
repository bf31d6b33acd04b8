// A guarded fake device for CPU-only tests of the device seam (ops/backend.h,
// core/device_runtime.h): a DeviceRuntime and an ops::Backend that report Device::cuda(0) but
// keep their "device" memory in one large host mapping that is PROT_NONE whenever no op runs.
// Each Backend op forwards to ops::cpu_backend() and each runtime copy() to a memmove, inside a
// window where the mapping is readable and writable; outside those windows any host code that
// dereferences device memory dies with SIGSEGV at the offending load or store, which is the
// access a real GPU would turn into garbage or a fault. The results are lib/ops's, bit for bit,
// so a run on the fake must equal the host run exactly.
//
// The ops also check their pointer arguments against the seam's contract: every float array
// must be device memory (inside the mapping), every host-side argument (token ids, targets,
// rows, positions, offsets, counts, sums, norms) host memory; a violation aborts naming the op
// and the argument. A CUDA backend would read a host pointer as garbage and fault on a device
// one passed where it reads the host.
//
// One process-wide instance (register_cuda_backends takes plain functions). Allocation is
// best-fit blocks of the mapping (core/range_arena.h, 256-byte aligned), given back when the
// adopting Buffer dies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/device_runtime.h"
#include "ops/backend.h"

namespace ms::test {

class FakeDevice {
 public:
  // Bytes reserved (address space only; pages are committed as blocks are first written).
  static constexpr size_t kCapacity = size_t{2} << 30;

  // The instance, reserved on first use.
  static FakeDevice& get();
  // Makes it the process's CUDA backend for cuda:0 (ops::backend_for(Device::cuda(0))).
  static void register_as_cuda();

  ops::Backend& backend(ops::MatmulPrecision precision = ops::MatmulPrecision::kF32);
  DeviceRuntime& runtime();

  // Whether [p, p + bytes) lies inside the mapping.
  bool contains(const void* p, size_t bytes = 1) const;
  // Blocks handed out now, bytes in use now and at most since start.
  size_t blocks() const;
  size_t in_use() const;
  size_t peak() const;
  // How many access windows have opened (ops and copies run): proof the fake did the work.
  int64_t windows() const;

  // Opens an access window for as long as it lives (nested and concurrent windows allowed;
  // the mapping is protected again when the last one closes). For the fake's own ops, and for
  // a test that inspects device memory on purpose.
  class Access {
   public:
    Access();
    ~Access();
    Access(const Access&) = delete;
    Access& operator=(const Access&) = delete;
  };

  struct State;  // the mapping, its arena and the open windows (fake_device.cc)

 private:
  FakeDevice();
  State* state_;  // lives for the process
};

// The pieces fake_device.cc and fake_device_ops.cc share: the Backend half (its ops on the
// instance's memory), and the abort that names a broken contract (no caller may go on).
std::unique_ptr<ops::Backend> make_fake_backend(DeviceRuntime& runtime,
                                               ops::MatmulPrecision precision);
[[noreturn]] void fake_device_abort(const std::string& what);
std::string fake_device_address(const void* p);

}  // namespace ms::test
