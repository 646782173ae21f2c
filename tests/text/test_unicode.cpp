// text/unicode.h: the strict UTF-8 decoder (valid sequences, and each kind of invalid one
// as single bytes) and the code point classes of the generated table.
#include <gtest/gtest.h>

#include <string>

#include "text/unicode.h"

using namespace tide::text;

namespace {

// The (code point, length) pairs decode_utf8 reads from s, start to end.
std::vector<std::pair<char32_t, int>> decode_all(std::string_view s) {
  std::vector<std::pair<char32_t, int>> out;
  for (size_t pos = 0; pos < s.size();) {
    Utf8Char c = decode_utf8(s, pos);
    out.emplace_back(c.cp, c.len);
    pos += size_t(c.len);
  }
  return out;
}

using Chars = std::vector<std::pair<char32_t, int>>;
constexpr char32_t X = kInvalidByte;

}  // namespace

TEST(Utf8, DecodesValidSequencesOfEveryLength) {
  EXPECT_EQ(decode_all("A\xc3\xa9\xe2\x82\xac\xf0\x9f\x9a\x80"),
            (Chars{{U'A', 1}, {0xE9, 2}, {0x20AC, 3}, {0x1F680, 4}}));
  EXPECT_EQ(decode_all("\xf4\x8f\xbf\xbf\xef\xbf\xbf\xc2\x80"),
            (Chars{{0x10FFFF, 4}, {0xFFFF, 3}, {0x80, 2}}));
  EXPECT_EQ(decode_all(std::string("\0a", 2)), (Chars{{0, 1}, {U'a', 1}}));
}

TEST(Utf8, InvalidBytesComeOneAtATime) {
  // Lone continuation bytes, C0/C1 and F5..FF leads.
  EXPECT_EQ(decode_all("\x80\xbf\xc0\xc1\xf5\xff"),
            (Chars{{X, 1}, {X, 1}, {X, 1}, {X, 1}, {X, 1}, {X, 1}}));
  // Overlong (E0 80 80 is U+0000 in three bytes), a surrogate (U+D800) and past U+10FFFF:
  // each byte alone, so the continuation bytes after the lead are invalid too.
  EXPECT_EQ(decode_all("\xe0\x80\x80"), (Chars{{X, 1}, {X, 1}, {X, 1}}));
  EXPECT_EQ(decode_all("\xed\xa0\x80"), (Chars{{X, 1}, {X, 1}, {X, 1}}));
  EXPECT_EQ(decode_all("\xf4\x90\x80\x80"), (Chars{{X, 1}, {X, 1}, {X, 1}, {X, 1}}));
  // Truncated at the end and before an ASCII byte, which still decodes.
  EXPECT_EQ(decode_all("\xe2\x82"), (Chars{{X, 1}, {X, 1}}));
  EXPECT_EQ(decode_all("\xf0\x9f\x98"
                       "a"),
            (Chars{{X, 1}, {X, 1}, {X, 1}, {U'a', 1}}));
}

TEST(CharClass, AsciiAndBeyond) {
  EXPECT_EQ(char_class(U'a'), CharClass::letter);
  EXPECT_EQ(char_class(U'Z'), CharClass::letter);
  EXPECT_EQ(char_class(U'7'), CharClass::number);
  for (char32_t c : {U' ', U'\t', U'\n', U'\v', U'\f', U'\r'})
    EXPECT_EQ(char_class(c), CharClass::space);
  // U+001C..U+001F are str.isspace() in Python but not \s of the regex module.
  for (char32_t c : {char32_t(0x1C), char32_t(0x1F), char32_t(0), U'\'', U'_', U'~'})
    EXPECT_EQ(char_class(c), CharClass::other) << uint32_t(c);
  EXPECT_EQ(char_class(0xE9), CharClass::letter);     // é
  EXPECT_EQ(char_class(0x4E16), CharClass::letter);   // 世 (Lo)
  EXPECT_EQ(char_class(0x02B0), CharClass::letter);   // ʰ (Lm)
  EXPECT_EQ(char_class(0x0663), CharClass::number);   // Arabic-Indic three (Nd)
  EXPECT_EQ(char_class(0x2167), CharClass::number);   // Roman numeral eight (Nl)
  EXPECT_EQ(char_class(0x00BD), CharClass::number);   // ½ (No)
  EXPECT_EQ(char_class(0x1D7D8), CharClass::number);  // mathematical double-struck zero
  EXPECT_EQ(char_class(0x00A0), CharClass::space);    // no-break space
  EXPECT_EQ(char_class(0x0085), CharClass::space);    // next line
  EXPECT_EQ(char_class(0x3000), CharClass::space);    // ideographic space
  EXPECT_EQ(char_class(0x200B), CharClass::other);    // zero width space: not White_Space
  EXPECT_EQ(char_class(0x1F680), CharClass::other);   // rocket
  EXPECT_EQ(char_class(0x0301), CharClass::other);    // combining acute (Mn)
  EXPECT_EQ(char_class(0xD800), CharClass::other);    // surrogate
  EXPECT_EQ(char_class(0x10FFFF), CharClass::other);  // noncharacter
  EXPECT_EQ(char_class(0x110000), CharClass::other);  // past Unicode
  EXPECT_EQ(char_class(kInvalidByte), CharClass::other);
}

TEST(CharClass, TableIsSortedAndStartsAtZero) {
  ASSERT_GT(detail::kUnicodeClassTableSize, 100);
  EXPECT_EQ(detail::kUnicodeClassTable[0] >> 2, 0u);
  for (int i = 1; i < detail::kUnicodeClassTableSize; ++i) {
    ASSERT_LT(detail::kUnicodeClassTable[i - 1] >> 2, detail::kUnicodeClassTable[i] >> 2) << i;
    // Neighbours differ in class, else the generator would have joined them.
    ASSERT_NE(detail::kUnicodeClassTable[i - 1] & 3, detail::kUnicodeClassTable[i] & 3) << i;
  }
  // The table agrees with the ASCII fast path on every ASCII character.
  for (char32_t c = 0; c < 128; ++c) {
    const uint32_t* t = detail::kUnicodeClassTable;
    int i = 0;
    while (i + 1 < detail::kUnicodeClassTableSize && (t[i + 1] >> 2) <= c) ++i;
    EXPECT_EQ(CharClass(t[i] & 3), char_class(c)) << uint32_t(c);
  }
}
