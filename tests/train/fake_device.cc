// The guarded fake device (fake_device.h).
#include "fake_device.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/range_arena.h"
#include "ops/backend_registry.h"

namespace ms::test {

void fake_device_abort(const std::string& what) {
  std::fprintf(stderr, "fake device: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string fake_device_address(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

namespace {

constexpr Device kDevice = Device::cuda(0);

Status on_device(const Device& got, const char* what) {
  if (got == kDevice) return Status::OK();
  return InvalidArgument(std::string(what) + " is on " + device_name(got) + ", not cuda:0");
}

}  // namespace

struct FakeDevice::State {
  std::byte* base = nullptr;
  std::mutex arena_mutex;
  RangeArena arena{kCapacity};
  std::mutex window_mutex;
  int open_windows = 0;
  int64_t windows_opened = 0;
  DeviceRuntime* runtime = nullptr;
  ops::Backend* backends[2] = {nullptr, nullptr};  // f32, bf16 (ops::MatmulPrecision)

  void protect(int prot) const {
    if (::mprotect(base, kCapacity, prot) != 0) {
      fake_device_abort("mprotect: " + std::string(std::strerror(errno)));
    }
  }
  static void release(void* context, void* data, size_t) {
    auto* self = static_cast<State*>(context);
    std::lock_guard<std::mutex> lock(self->arena_mutex);
    if (!self->arena.release(static_cast<size_t>(static_cast<std::byte*>(data) - self->base))) {
      fake_device_abort("a block given back twice or never handed out: " +
                        fake_device_address(data));
    }
  }
};

namespace {

class FakeAllocator final : public Allocator {
 public:
  explicit FakeAllocator(FakeDevice::State& s) : s_(s) {}
  Device device() const override { return kDevice; }
  Result<Buffer> allocate(size_t bytes, const Stream& stream) override {
    MS_RETURN_IF_ERROR(on_device(stream.device, "the allocation's stream"));
    std::optional<size_t> offset;
    {
      std::lock_guard<std::mutex> lock(s_.arena_mutex);
      offset = s_.arena.allocate(bytes);
      if (!offset) {
        return Unavailable("fake device: out of memory for " + std::to_string(bytes) + " bytes (" +
                           s_.arena.describe() + ")");
      }
    }
    return Buffer::adopt(s_.base + *offset, bytes, kDevice, {&FakeDevice::State::release, &s_},
                         RangeArena::kDefaultAlignment);
  }

 private:
  FakeDevice::State& s_;
};

class FakeRuntime final : public DeviceRuntime {
 public:
  explicit FakeRuntime(FakeDevice::State& s) : allocator_(s) {}
  Device device() const override { return kDevice; }
  Allocator& allocator() override { return allocator_; }
  Stream default_stream() const override { return Stream{kDevice, nullptr}; }
  Result<Event> record(const Stream& stream) override {
    MS_RETURN_IF_ERROR(on_device(stream.device, "the stream"));
    return Event{kDevice, nullptr};
  }
  Status wait(const Stream& stream, const Event& event) override {
    MS_RETURN_IF_ERROR(on_device(stream.device, "the stream"));
    return on_device(event.device, "the event");
  }
  Status synchronize(const Stream& stream) override {
    return on_device(stream.device, "the stream");
  }
  Status copy(Tensor& dst, const Tensor& src, const Stream& stream) override {
    MS_RETURN_IF_ERROR(on_device(stream.device, "the copy's stream"));
    for (const Tensor* t : {static_cast<const Tensor*>(&dst), &src}) {
      if (!t->device().is_host() && t->device() != kDevice) {
        return InvalidArgument("copy " + t->describe() + ": it is on " + device_name(t->device()) +
                               ", this runtime is cuda:0");
      }
    }
    if (dst.dtype() != src.dtype() || dst.numel() != src.numel()) {
      return InvalidArgument("copy " + src.describe() + " into " + dst.describe() +
                             ": the dtypes and element counts must match");
    }
    if (src.nbytes() == 0) return Status::OK();
    // A tensor's label must say where its bytes are: cudaMemcpyDefault would follow the
    // address, but code that trusts the label (a host read of a "host" tensor) would not.
    for (const Tensor* t : {static_cast<const Tensor*>(&dst), &src}) {
      const bool inside = FakeDevice::get().contains(t->raw_data(), t->nbytes());
      if (inside != !t->device().is_host()) {
        fake_device_abort("copy: " + t->describe() + " at " + fake_device_address(t->raw_data()) +
                          " is labelled " + device_name(t->device()) + " but lies " +
                          (inside ? "in" : "outside") + " device memory");
      }
    }
    FakeDevice::Access access;
    std::memmove(dst.raw_data(), src.raw_data(), src.nbytes());
    return Status::OK();
  }

 private:
  FakeAllocator allocator_;
};

// A fault inside the mapping is a host access of device memory: say so (only async-signal-safe
// calls), then let the previous handler (the default: a core) take the fault again.
struct sigaction previous_segv;
std::byte* fault_base = nullptr;

void on_segv(int sig, siginfo_t* info, void*) {
  const auto* at = static_cast<const std::byte*>(info->si_addr);
  if (fault_base != nullptr && at >= fault_base && at < fault_base + FakeDevice::kCapacity) {
    static const char kText[] =
        "fake device: SIGSEGV: the host touched device memory outside an op (run the test under "
        "gdb for the stack)\n";
    (void)!::write(STDERR_FILENO, kText, sizeof(kText) - 1);
  }
  ::sigaction(sig, &previous_segv, nullptr);
}

Result<ops::Backend*> open_fake(Device device, ops::MatmulPrecision precision) {
  if (device != kDevice) {
    return Unavailable("the fake device is cuda:0 only, not " + device_name(device));
  }
  return &FakeDevice::get().backend(precision);
}

ops::DeviceMemory fake_memory(Device) {
  const FakeDevice& fake = FakeDevice::get();
  return {fake.in_use(), fake.peak(), FakeDevice::kCapacity};
}

std::string describe_fake(Device) {
  return "guarded fake device (cuda:0: host memory, inaccessible outside ops)";
}

}  // namespace

FakeDevice::FakeDevice() : state_(new State) {
  void* base =
      ::mmap(nullptr, kCapacity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED)
    fake_device_abort("mmap of the device region: " + std::string(std::strerror(errno)));
  state_->base = static_cast<std::byte*>(base);
  fault_base = state_->base;
  struct sigaction action {};
  action.sa_sigaction = &on_segv;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGSEGV, &action, &previous_segv);
  state_->runtime = new FakeRuntime(*state_);
  for (ops::MatmulPrecision p : {ops::MatmulPrecision::kF32, ops::MatmulPrecision::kBf16}) {
    state_->backends[static_cast<int>(p)] = make_fake_backend(*state_->runtime, p).release();
  }
}

FakeDevice& FakeDevice::get() {
  static FakeDevice* device = new FakeDevice;  // never destroyed: buffers may outlive main
  return *device;
}

void FakeDevice::register_as_cuda() {
  get();
  ops::register_cuda_backends({&open_fake, &fake_memory, &describe_fake});
}

ops::Backend& FakeDevice::backend(ops::MatmulPrecision precision) {
  return *state_->backends[static_cast<int>(precision)];
}
DeviceRuntime& FakeDevice::runtime() { return *state_->runtime; }

bool FakeDevice::contains(const void* p, size_t bytes) const {
  const auto* b = static_cast<const std::byte*>(p);
  return b >= state_->base && bytes <= kCapacity &&
         b - state_->base <= static_cast<std::ptrdiff_t>(kCapacity - bytes);
}

size_t FakeDevice::blocks() const {
  std::lock_guard<std::mutex> lock(state_->arena_mutex);
  return state_->arena.allocated_blocks();
}
size_t FakeDevice::in_use() const {
  std::lock_guard<std::mutex> lock(state_->arena_mutex);
  return state_->arena.in_use();
}
size_t FakeDevice::peak() const {
  std::lock_guard<std::mutex> lock(state_->arena_mutex);
  return state_->arena.peak();
}
int64_t FakeDevice::windows() const {
  std::lock_guard<std::mutex> lock(state_->window_mutex);
  return state_->windows_opened;
}

FakeDevice::Access::Access() {
  State& s = *get().state_;
  std::lock_guard<std::mutex> lock(s.window_mutex);
  ++s.windows_opened;
  if (s.open_windows++ == 0) s.protect(PROT_READ | PROT_WRITE);
}

FakeDevice::Access::~Access() {
  State& s = *get().state_;
  std::lock_guard<std::mutex> lock(s.window_mutex);
  if (--s.open_windows == 0) s.protect(PROT_NONE);
}

}  // namespace ms::test
