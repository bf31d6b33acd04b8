// Key lookup and did-you-mean over the declared key paths; see key_tree.h.
#include "config/key_tree.h"

#include <cassert>
#include <span>

#include "config/suggest.h"

namespace ms::config {

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

KeyTree::KeyTree() : nodes_(1) {}

std::string KeyTree::join(std::size_t node, std::string_view name) const {
  if (node == kRoot) return std::string(name);
  return nodes_[node].path + "." + std::string(name);
}

void KeyTree::add_leaf(std::string_view path, std::size_t field) {
  const std::vector<std::string_view> parts = split_path(path);
  std::size_t node = kRoot;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    assert(!parts[i].empty() && "config key path has an empty component");
    assert(!is_leaf(node) && "config key used both as a value and as a section");
    std::optional<std::size_t> next = child(node, parts[i]);
    if (!next) {
      Node created{std::string(parts[i]), join(node, parts[i]), std::nullopt, {}};
      nodes_.push_back(std::move(created));
      next = nodes_.size() - 1;
      nodes_[node].children.push_back(*next);
    } else {
      assert(i + 1 < parts.size() && "config key declared twice");
    }
    node = *next;
  }
  assert(nodes_[node].children.empty() && "config key used both as a value and as a section");
  nodes_[node].field = field;
}

std::optional<std::size_t> KeyTree::child(std::size_t node, std::string_view name) const {
  for (std::size_t c : nodes_[node].children) {
    if (nodes_[c].name == name) return c;
  }
  return std::nullopt;
}

std::optional<std::size_t> KeyTree::find(std::string_view path) const {
  std::size_t node = kRoot;
  for (std::string_view part : split_path(path)) {
    std::optional<std::size_t> next = child(node, part);
    if (!next) return std::nullopt;
    node = *next;
  }
  return node;
}

namespace {

// The node reached from `node` by following `parts`, if every step exists.
std::optional<std::size_t> descend(const KeyTree& tree, std::size_t node,
                                   std::span<const std::string_view> parts) {
  for (std::string_view part : parts) {
    std::optional<std::size_t> next = tree.child(node, part);
    if (!next) return std::nullopt;
    node = *next;
  }
  return node;
}

}  // namespace

std::optional<std::string> KeyTree::suggest(std::string_view typed) const {
  const std::vector<std::string_view> parts = split_path(typed);
  std::size_t node = kRoot;
  std::size_t unknown = 0;
  while (unknown < parts.size()) {
    std::optional<std::size_t> next = child(node, parts[unknown]);
    if (!next) break;
    node = *next;
    ++unknown;
  }
  if (unknown == parts.size()) return std::nullopt;

  std::vector<std::string> sibling_names;
  for (std::size_t c : nodes_[node].children) sibling_names.push_back(nodes_[c].name);
  if (std::optional<std::string> close = closest_match(parts[unknown], sibling_names)) {
    const std::size_t match = *child(node, *close);
    const std::span<const std::string_view> rest(parts.begin() + unknown + 1, parts.end());
    if (std::optional<std::size_t> full = descend(*this, match, rest)) return path(*full);
    return path(match);
  }

  std::string tail;
  for (std::size_t i = unknown; i < parts.size(); ++i) {
    tail += "." + std::string(parts[i]);
  }
  for (const Node& candidate : nodes_) {
    const std::string& p = candidate.path;
    if (p.size() > tail.size() && p.compare(p.size() - tail.size(), tail.size(), tail) == 0) {
      return p;
    }
  }
  return std::nullopt;
}

}  // namespace ms::config
