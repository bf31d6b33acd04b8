// UTF-8 validation and GPT-2's byte-level alphabet (see unicode_utf8.h).
#include "data/unicode_utf8.h"


namespace ms::data {

size_t utf8_char_length(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[pos + i]); };
  const uint8_t b0 = byte(0);
  if (b0 < 0x80) return 1;
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (pos + len > s.size()) return 0;
  if (byte(1) < lo || byte(1) > hi) return 0;
  for (size_t i = 2; i < len; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
  }
  return len;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

bool is_printable_latin1(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::array<std::string, 256> make_alphabet() {
  std::array<std::string, 256> alphabet;
  char32_t next_extra = 0x100;
  for (int b = 0; b < 256; ++b) {
    append_utf8(alphabet[b], is_printable_latin1(b) ? static_cast<char32_t>(b) : next_extra++);
  }
  return alphabet;
}

// Every character of the alphabet is below U+0800 (one or two UTF-8 bytes), so its inverse is
// a table by code point: the byte, or -1 for a character outside the alphabet.
constexpr char32_t kAlphabetCodePoints = 0x800;

const std::array<int16_t, kAlphabetCodePoints>& alphabet_inverse() {
  static const std::array<int16_t, kAlphabetCodePoints> inverse = [] {
    std::array<int16_t, kAlphabetCodePoints> table;
    table.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = is_printable_latin1(b) ? static_cast<char32_t>(b) : next_extra++;
      table[cp] = static_cast<int16_t>(b);
    }
    return table;
  }();
  return inverse;
}

}  // namespace

const std::array<std::string, 256>& byte_level_alphabet() {
  static const std::array<std::string, 256> alphabet = make_alphabet();
  return alphabet;
}

std::optional<std::string> byte_level_to_bytes(std::string_view spelling) {
  const auto& inverse = alphabet_inverse();
  std::string out;
  out.reserve(spelling.size());
  size_t pos = 0;
  while (pos < spelling.size()) {
    const size_t len = utf8_char_length(spelling, pos);
    const auto byte = [&](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(spelling[pos + i])); };
    char32_t cp;
    if (len == 1) cp = byte(0);
    else if (len == 2) cp = ((byte(0) & 0x1F) << 6) | (byte(1) & 0x3F);
    else return std::nullopt;  // not UTF-8, or a character of three or four bytes: outside
    if (inverse[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(inverse[cp]));
    pos += len;
  }
  return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& alphabet = byte_level_alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += alphabet[static_cast<uint8_t>(c)];
  return out;
}

}  // namespace ms::data
