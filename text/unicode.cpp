// Code point classes and UTF-8 decoding for the GPT-2 pre-tokenizer (see unicode.h).
#include "text/unicode.h"

#include <algorithm>
#include <array>

namespace tide::text {

namespace {

// ASCII looked up directly: nearly every character of an English text.
constexpr std::array<CharClass, 128> ascii_classes() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) t[c] = CharClass::letter;
    else if (c >= '0' && c <= '9') t[c] = CharClass::number;
    else if (c == ' ' || (c >= '\t' && c <= '\r')) t[c] = CharClass::space;
    else t[c] = CharClass::other;
  }
  return t;
}
constexpr std::array<CharClass, 128> kAscii = ascii_classes();

bool continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

}  // namespace

CharClass char_class(char32_t cp) {
  if (cp < 128) return kAscii[cp];
  if (cp > 0x10FFFF) return CharClass::other;
  const uint32_t* begin = detail::kUnicodeClassTable;
  const uint32_t* end = begin + detail::kUnicodeClassTableSize;
  // The last entry whose start is <= cp: entries compare by start (the top 30 bits).
  const uint32_t key = (uint32_t(cp) << 2) | 3u;
  const uint32_t* it = std::upper_bound(begin, end, key);
  return CharClass(*(it - 1) & 3u);
}

Utf8Char decode_utf8(std::string_view text, size_t pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const unsigned char b0 = s[pos];
  if (b0 < 0x80) return {b0, 1};
  int len;
  char32_t cp, min;
  if (b0 >= 0xC2 && b0 <= 0xDF) len = 2, cp = b0 & 0x1F, min = 0x80;
  else if (b0 >= 0xE0 && b0 <= 0xEF) len = 3, cp = b0 & 0x0F, min = 0x800;
  else if (b0 >= 0xF0 && b0 <= 0xF4) len = 4, cp = b0 & 0x07, min = 0x10000;
  else return {kInvalidByte, 1};  // a continuation byte, C0, C1 or F5..FF
  if (pos + size_t(len) > n) return {kInvalidByte, 1};
  for (int k = 1; k < len; ++k) {
    if (!continuation(s[pos + k])) return {kInvalidByte, 1};
    cp = (cp << 6) | (s[pos + k] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalidByte, 1};
  return {cp, len};
}

}  // namespace tide::text
