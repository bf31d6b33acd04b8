// What a job's terminal output says about how it ended: which rank failed first, as the
// launchers and ms-train word it, and whether ms-train stopped on a non-finite loss. The
// patterns are those of OpenMPI 4 (mpirun), Slurm's srun and ms-train's own failure agreement
// (docs/comm.md); tests/supervise pins each against a sample of the real text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ms::supervise {

struct FailedRank {
  int rank = -1;
  std::string how;  // the line that names it
};

// The rank the output blames: one a signal killed ("mpirun noticed that process rank N ...
// exited on signal S"), else ms-train's "<what> failed on rank W" (the error's origin), else the
// launcher's first process to fail ("MPI_ABORT was invoked on rank N", "Process name:
// [[J,K],N]", "srun: error: HOST: task N:").
std::optional<FailedRank> failed_rank_in_output(std::string_view output);

struct NumericalFault {
  int64_t step = 0;
  int rank = -1;  // the rank ms-train names; -1 when it names none (a gradient norm)
  std::string line;
};

// ms-train's "the training loss is not finite at step K on rank W" or "the gradient norm is not
// finite at step K".
std::optional<NumericalFault> numerical_fault_in_output(std::string_view output);

// The last `lines` lines of `output`.
std::string last_lines(std::string_view output, int lines);

}  // namespace ms::supervise
