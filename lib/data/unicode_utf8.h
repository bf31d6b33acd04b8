// UTF-8 helpers for the tokenizers: validation that tells valid runs from stray bytes (so
// invalid input never reaches the UTF-mode regex and is encoded byte by byte), and GPT-2's
// byte-to-unicode alphabet in which byte-level BPE vocabularies spell their tokens.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ms::data {

// Length (1-4) of the well-formed UTF-8 character starting at s[pos], or 0 when the bytes there
// are not one (stray continuation byte, overlong form, surrogate, > U+10FFFF, truncated).
size_t utf8_char_length(std::string_view s, size_t pos);

// Calls on_valid(run) for each maximal well-formed UTF-8 run and on_invalid(byte_piece) for
// each byte that belongs to no well-formed character, in text order.
template <typename OnValid, typename OnInvalid>
void for_each_utf8_run(std::string_view s, OnValid on_valid, OnInvalid on_invalid) {
  size_t run_begin = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t len = utf8_char_length(s, pos);
    if (len > 0) {
      pos += len;
      continue;
    }
    if (pos > run_begin) on_valid(s.substr(run_begin, pos - run_begin));
    on_invalid(s.substr(pos, 1));
    run_begin = ++pos;
  }
  if (pos > run_begin) on_valid(s.substr(run_begin, pos - run_begin));
}

// Appends the UTF-8 encoding of code point `cp` (must be <= U+10FFFF).
void append_utf8(std::string& out, char32_t cp);

// GPT-2's reversible byte -> printable character map: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order. Entry b is the UTF-8 spelling.
const std::array<std::string, 256>& byte_level_alphabet();

// Inverse of the alphabet over a whole token spelling ("Ġthe" -> " the"); nullopt when a
// character is outside the alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view spelling);

// The alphabet spelling of raw bytes (" the" -> "Ġthe").
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace ms::data
