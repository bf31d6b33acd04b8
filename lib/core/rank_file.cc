// Per-rank file names; see rank_file.h.
#include "core/rank_file.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace ms {

namespace {
constexpr std::string_view kPrefix = "rank-";
}  // namespace

std::string rank_file_name(int rank, std::string_view extension) {
  char digits[16];
  std::snprintf(digits, sizeof(digits), "%05d", rank);
  return std::string(kPrefix) + digits + std::string(extension);
}

bool is_rank_file_name(std::string_view name, std::string_view extension) {
  if (name.size() <= kPrefix.size() + extension.size()) return false;
  if (!name.starts_with(kPrefix) || !name.ends_with(extension)) return false;
  const std::string_view digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - extension.size());
  return std::all_of(digits.begin(), digits.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

}  // namespace ms
