// The heap's policy on returning memory; see heap_policy.h.
#include "core/heap_policy.h"

#include <cstdlib>  // also defines __GLIBC__ on glibc
#include <string_view>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ms {

void keep_freed_memory_mapped() {
  const char* setting = std::getenv("MS_KEEP_FREED_MEMORY");
  if (setting != nullptr && std::string_view(setting) == "0") return;
#if defined(__GLIBC__)
  // Fixing either threshold also turns off glibc's adaptation of both (mallopt(3)).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, -1);  // -1: never trim
#endif
}

}  // namespace ms
