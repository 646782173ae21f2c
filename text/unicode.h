// What GPT-2's pre-tokenizer needs of Unicode: the class of a code point (letter, number,
// white space or other, as the Python regex module's \p{L}, \p{N} and \s of its reference
// encoder) and a strict UTF-8 decoder that turns each byte of an invalid sequence into one
// "other" character, as Python's surrogateescape does.
// Not done here: normalisation, case, any other property.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tide::text {

enum class CharClass : uint8_t { other = 0, letter = 1, number = 2, space = 3 };

// The class of code point `cp`: letter (Unicode L*), number (N*), space (White_Space) or
// other. Surrogates and values past U+10FFFF are other.
CharClass char_class(char32_t cp);

// One character of a UTF-8 text: its code point and its length in bytes (1 to 4).
struct Utf8Char {
  char32_t cp;
  int len;
};

// Stands for a byte that starts no valid UTF-8 sequence (its class is other).
inline constexpr char32_t kInvalidByte = 0xFFFFFFFF;

// The character at text[pos] (pos < text.size()). A byte that does not start a complete,
// shortest-form sequence of a scalar value (no surrogates, at most U+10FFFF) is returned
// alone as {kInvalidByte, 1}, so any bytes decode and every byte is covered once.
Utf8Char decode_utf8(std::string_view text, size_t pos);

namespace detail {
// Generated (text/unicode_classes.cpp): start << 2 | class, sorted by start.
extern const uint32_t kUnicodeClassTable[];
extern const int kUnicodeClassTableSize;
}  // namespace detail

}  // namespace tide::text
