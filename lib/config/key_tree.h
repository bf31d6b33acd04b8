// The dotted key paths of a schema as a tree of sections ("optim") and leaves ("optim.lr"), in
// declaration order. It answers the questions parsing asks of a key: is it a leaf, a section,
// or unknown, and if unknown, which declared key was probably meant. Independent of the config
// struct, so it is compiled once rather than per schema.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ms::config {

class KeyTree {
 public:
  static constexpr std::size_t kRoot = 0;

  KeyTree();

  // Declares leaf `path` ("model.moe.top_k") as field number `field`, creating its sections.
  // A repeated path, an empty component, or a leaf used as a section is a programming error
  // and asserts.
  void add_leaf(std::string_view path, std::size_t field);

  // The child of `node` called `name`, if any.
  std::optional<std::size_t> child(std::size_t node, std::string_view name) const;
  // The node at a full dotted path, if any.
  std::optional<std::size_t> find(std::string_view path) const;

  bool is_leaf(std::size_t node) const { return nodes_[node].field.has_value(); }
  std::size_t field(std::size_t node) const { return *nodes_[node].field; }
  // Full dotted path; empty for the root.
  const std::string& path(std::size_t node) const { return nodes_[node].path; }
  const std::string& name(std::size_t node) const { return nodes_[node].name; }
  const std::vector<std::size_t>& children(std::size_t node) const {
    return nodes_[node].children;
  }

  // The full dotted path of the declared key `typed` (an unknown full path) most likely meant:
  // the first unknown component is matched against its siblings by edit distance and the rest
  // of the path kept when it resolves below the match; failing that, a key elsewhere whose
  // trailing components equal the unknown part ("train.lr" -> "optim.lr"). Nothing when no
  // key is plausibly meant.
  std::optional<std::string> suggest(std::string_view typed) const;

  // `path` joined under section `node`.
  std::string join(std::size_t node, std::string_view name) const;

 private:
  struct Node {
    std::string name;
    std::string path;
    std::optional<std::size_t> field;
    std::vector<std::size_t> children;
  };
  std::vector<Node> nodes_;
};

// "a.b.c" -> {"a", "b", "c"}.
std::vector<std::string_view> split_path(std::string_view path);

}  // namespace ms::config
