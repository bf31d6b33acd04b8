// The heap's policy on returning memory; see heap_policy.h.
#include "core/heap_policy.h"

#include <cstdlib>  // also defines __GLIBC__ on glibc
#include <string>
#include <string_view>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ms {

Status keep_freed_memory_mapped() {
  const char* setting = std::getenv("MS_KEEP_FREED_MEMORY");
  const std::string_view value = setting == nullptr ? "1" : setting;
  if (value != "0" && value != "1") {
    return InvalidArgument(
        "MS_KEEP_FREED_MEMORY must be 0 (the C library's heap policy) or 1 (keep freed memory "
        "mapped, the default), got '" + std::string(value) + "'");
  }
  if (value == "0") return Status::OK();
#if defined(__GLIBC__)
  // Fixing either threshold also turns off glibc's adaptation of both (mallopt(3)).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, -1);  // -1: never trim
#endif
  return Status::OK();
}

}  // namespace ms
