#include "supervise/job_output.h"

#include <regex>
#include <string>

namespace ms::supervise {
namespace {

// The first match of `pattern` in `output` (whose group 1 is a number), with its line.
std::optional<FailedRank> first_match(std::string_view output, const std::regex& pattern) {
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(output.begin(), output.end(), m, pattern)) return std::nullopt;
  const size_t at = static_cast<size_t>(m.position(0));
  const size_t begin = output.rfind('\n', at) == std::string_view::npos ? 0 : output.rfind('\n', at) + 1;
  const size_t end = std::min(output.find('\n', at), output.size());
  return FailedRank{std::stoi(m[1].str()), std::string(output.substr(begin, end - begin))};
}

}  // namespace

std::optional<FailedRank> failed_rank_in_output(std::string_view output) {
  // In order of preference: a rank a signal killed (its peers may fail after it, on the broken
  // connection), where an error arose, then who exited first.
  static const std::regex patterns[] = {
      std::regex(R"(mpirun noticed that process rank (\d{1,9}) .*exited on signal)"),
      std::regex(R"(failed on rank (\d{1,9}))"),
      std::regex(R"(MPI_ABORT was invoked on rank (\d{1,9}))"),
      std::regex(R"(Process name: \[\[\d+,\d+\],(\d{1,9})\])"),
      std::regex(R"(srun: error: \S+: tasks? (\d{1,9}))"),
  };
  for (const std::regex& pattern : patterns) {
    if (std::optional<FailedRank> found = first_match(output, pattern)) return found;
  }
  return std::nullopt;
}

std::optional<NumericalFault> numerical_fault_in_output(std::string_view output) {
  static const std::regex loss(R"(the training loss is not finite at step (\d{1,18}) on rank (\d{1,9}))");
  static const std::regex norm(R"(the gradient norm is not finite at step (\d{1,18}))");
  std::match_results<std::string_view::const_iterator> m;
  if (std::regex_search(output.begin(), output.end(), m, loss)) {
    return NumericalFault{std::stoll(m[1].str()), std::stoi(m[2].str()), m[0].str()};
  }
  if (std::regex_search(output.begin(), output.end(), m, norm)) {
    return NumericalFault{std::stoll(m[1].str()), -1, m[0].str()};
  }
  return std::nullopt;
}

std::string last_lines(std::string_view output, int lines) {
  size_t begin = output.size();
  if (begin > 0 && output[begin - 1] == '\n') --begin;
  for (int n = 0; n < lines && begin > 0; ++n) {
    const size_t nl = output.rfind('\n', begin - 1);
    begin = nl == std::string_view::npos ? 0 : nl;
    if (nl == std::string_view::npos) break;
  }
  if (begin < output.size() && output[begin] == '\n') ++begin;
  return std::string(output.substr(begin));
}

}  // namespace ms::supervise
