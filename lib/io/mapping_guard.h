// Memory-mapped input files that change under their reader. The dataset's .bin and the plan are
// read through mmap because the loader's hot path then costs a memcpy and no system call; the
// price is that a file truncated (or replaced in place) while mapped turns the next read of a
// lost page into SIGBUS, which would end the process with no file named. Reading with pread
// instead would make every read_tokens() fallible and a system call, for a fault that only a
// second writer causes. So mappings are registered here instead, and a SIGBUS whose address
// falls inside one prints "<program>: error: <file> was truncated or changed while mapped ..."
// and exits with status 1, as any other error of the toolkit does (under mpirun the launcher
// then ends the job). A SIGBUS elsewhere keeps its previous disposition.
#pragma once

#include <cstddef>
#include <string_view>

namespace ms::io {

// Registers [data, data + size) as a mapping of `path` (the first PATH_MAX bytes of it), and
// installs the SIGBUS handler on first use. Returns the registration to pass to
// unwatch_mapping, or -1 when the table of 1024 mappings is full (faults there stay SIGBUS).
// Thread-safe.
int watch_mapping(const void* data, size_t size, std::string_view path);

// Forgets registration `id` (-1 is ignored). Call before unmapping.
void unwatch_mapping(int id);

}  // namespace ms::io
