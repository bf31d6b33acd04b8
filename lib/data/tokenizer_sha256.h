// SHA-256 (FIPS 180-4) for tokenizer content hashes: a tokenizer's hash is recorded in dataset
// sidecars and plans, so it must be a standard, collision-resistant digest that other tools can
// recompute. Small and dependency-free; speed is irrelevant at a few MB per tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ms::data {

class Sha256 {
 public:
  Sha256();
  void update(std::string_view data);
  // Appends a length-prefixed field, so ("ab","c") and ("a","bc") hash differently.
  void update_field(std::string_view data);
  // Lowercase hex digest; the object must not be updated afterwards.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace ms::data
