// How the process's heap hands memory back to the kernel. glibc's malloc serves a large request
// (128 KiB at first, up to 32 MiB as it adapts) with a fresh mmap and unmaps it on free, and
// trims the heap's top once 128 KiB or more are free there; the next request of the size then
// faults every page in again. Open MPI's nonblocking reductions (libnbc) allocate a temporary
// buffer the size of each message per call: on the project's 2-core VM, where a page fault
// under the hypervisor costs several microseconds, the trainer waited 75-200 ms a step for its
// 26-40 MiB of gradient reductions, almost all of it faulting in those buffers, against 13-38 ms
// with the heap kept, and a dp=2 step ran 10-19% faster (docs/comm.md, "Freed memory stays
// mapped").
#pragma once

#include "core/status.h"

namespace ms {

// From now on requests up to 32 MiB (glibc's largest mmap threshold) come from the heap and the
// heap is never trimmed, so freed memory is reused without faults. The process's resident size
// then stays at its high-water mark. Call once, early, before the memory it concerns is
// allocated; on a C library other than glibc it does nothing, and with MS_KEEP_FREED_MEMORY=0
// in the environment neither (the C library's own policy stays). InvalidArgument naming the
// variable when it is set to anything but 0 or 1.
Status keep_freed_memory_mapped();

}  // namespace ms
