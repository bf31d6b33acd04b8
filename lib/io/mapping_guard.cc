// The handler may only make async-signal-safe calls: it scans a fixed table whose entries are
// published with atomics, formats with its own digit loop and leaves with write(2) and _exit.
#include "io/mapping_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "io/env.h"

namespace ms::io {
namespace {

constexpr int kSlots = 1024;

struct Slot {
  std::atomic<uintptr_t> begin{0};  // 0: free; set last, when size and path are in place
  std::atomic<size_t> size{0};
  char path[PATH_MAX] = {};
};

Slot g_slots[kSlots];
bool g_used[kSlots];  // guarded by g_mutex (begin alone cannot tell a slot being filled)
std::mutex g_mutex;
struct sigaction g_previous;

void write_text(const char* text, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, text, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}

void write_text(const char* text) { write_text(text, std::strlen(text)); }

void write_number(uint64_t value) {
  char digits[24];
  size_t n = 0;
  do {
    digits[sizeof(digits) - 1 - n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  write_text(digits + sizeof(digits) - n, n);
}

// The slot whose mapping holds `address`, or null.
const Slot* slot_of(uintptr_t address) {
  for (const Slot& s : g_slots) {
    const uintptr_t begin = s.begin.load(std::memory_order_acquire);
    if (begin != 0 && address >= begin && address - begin < s.size.load()) return &s;
  }
  return nullptr;
}

extern "C" void on_sigbus(int signal, siginfo_t* info, void*) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  const Slot* slot = slot_of(address);
  if (slot == nullptr) {
    // Not a mapped input: back to what was there before, which the re-raised signal (or the
    // faulting instruction, run again) meets.
    ::sigaction(SIGBUS, &g_previous, nullptr);
    ::raise(signal);
    return;
  }
  write_text(program_invocation_short_name);
  write_text(": error: ");
  write_text(slot->path);
  write_text(" was truncated or changed while mapped (a read at byte ");
  write_number(address - slot->begin.load());
  write_text(" of it failed); something rewrote the file during the run\n");
  ::_exit(1);
}

void install_handler() {
  struct sigaction action = {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, &g_previous);
}

}  // namespace

int watch_mapping(const void* data, size_t size, std::string_view path) {
  if (data == nullptr || size == 0) return -1;
  static std::once_flag installed;
  std::call_once(installed, install_handler);
  std::lock_guard<std::mutex> lock(g_mutex);
  for (int id = 0; id < kSlots; ++id) {
    if (g_used[id]) continue;
    g_used[id] = true;
    Slot& s = g_slots[id];
    const size_t n = std::min(path.size(), sizeof(s.path) - 1);
    std::memcpy(s.path, path.data(), n);
    s.path[n] = '\0';
    s.size.store(size);
    s.begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
    return id;
  }
  return -1;
}

void unwatch_mapping(int id) {
  if (id < 0 || id >= kSlots) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_slots[id].begin.store(0, std::memory_order_release);
  g_used[id] = false;
}

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path,
                                                    std::string_view what) {
  const std::string name = std::string(what) + " '" + path + "'";
  // Non-blocking, so that a FIFO in the file's place is refused below instead of waiting for a
  // writer; the flag changes nothing for the regular file that is mapped.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(name + " does not exist");
    return ErrnoError("cannot open " + std::string(what), path, errno);
  }
  std::unique_ptr<MappedFile> file(new MappedFile());
  struct stat st {};
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = ErrnoError("cannot stat " + std::string(what), path, errno);
  } else if (const FileKind kind = file_kind_of_mode(st.st_mode); kind != FileKind::kRegular) {
    status = InvalidArgument(name + " is " + std::string(file_kind_name(kind)) +
                             ", not a regular file");
  } else if (st.st_size > 0) {
    const size_t size = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      status = ErrnoError("cannot map " + std::string(what), path, errno);
    } else {
      file->data_ = static_cast<const uint8_t*>(p);
      file->size_ = size;
      file->watch_ = watch_mapping(p, size, path);
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return file;
}

MappedFile::~MappedFile() {
  unwatch_mapping(watch_);
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace ms::io
