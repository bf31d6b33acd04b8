// "Did you mean ...?" for misspelled names: config keys here, and any other closed vocabulary a
// tool accepts (subcommands, enum values). Uses the optimal-string-alignment distance, so a
// swapped pair of letters ("stpes") counts as one edit like a missing or extra letter does.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ms::config {

// Edits (insert, delete, substitute, swap of adjacent letters) that turn `a` into `b`.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `typed`, if it is close enough to be a plausible typo: at most
// 1 + |typed|/4 edits, capped at 3. Ties go to the earlier candidate. Returns nothing when no
// candidate is close, so callers never suggest something unrelated.
std::optional<std::string> closest_match(std::string_view typed,
                                         const std::vector<std::string>& candidates);

}  // namespace ms::config
