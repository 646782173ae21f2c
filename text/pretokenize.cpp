// GPT-2's pre-tokenizer (see pretokenize.h). Each piece is the first alternative of the
// pattern that matches at the current character, decoded as it is scanned. None of the
// alternatives needs backtracking beyond the one step of \s+(?!\S), which gives up the last
// white space before a non-space.
#include "text/pretokenize.h"

#include "text/unicode.h"

namespace tide::text {

namespace {

struct Char {
  char32_t cp;
  CharClass cls;
  size_t end;  // byte offset just past it
};

// The character at byte `pos`, or {0, space, pos} at the end of the text (a class that ends
// every run of letters, numbers and others; a run of spaces checks the end itself).
Char char_at(std::string_view text, size_t pos) {
  if (pos >= text.size()) return {0, CharClass::space, pos};
  const Utf8Char c = decode_utf8(text, pos);
  const CharClass cls = c.cp == kInvalidByte ? CharClass::other : char_class(c.cp);
  return {c.cp, cls, pos + size_t(c.len)};
}

// The end of the run of letters, numbers or others (cls, not space) that starts at `pos`.
size_t run_end(std::string_view text, size_t pos, CharClass cls) {
  for (;;) {
    const Char c = char_at(text, pos);
    if (pos >= text.size() || c.cls != cls) return pos;
    pos = c.end;
  }
}

// The byte length of the contraction ('s 't 're 've 'm 'll 'd, lower case only) at `pos`,
// or 0.
size_t contraction(std::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size()) return 0;
  const char a = text[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= text.size()) return 0;
  const char b = text[pos + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

size_t detail::gpt2_piece_end(std::string_view text, size_t pos) {
  if (size_t len = contraction(text, pos)) return pos + len;
  const Char first = char_at(text, pos);
  if (first.cp == U' ' && first.end < text.size()) {
    // " ?\p{L}+", " ?\p{N}+" and " ?[^\s\p{L}\p{N}]+" with the space taken.
    const Char next = char_at(text, first.end);
    if (next.cls != CharClass::space) return run_end(text, first.end, next.cls);
  }
  if (first.cls != CharClass::space) return run_end(text, pos, first.cls);
  // \s+(?!\S): the run of white space, less its last character when a non-space follows;
  // \s+ when that would leave nothing (one white space before a non-space).
  size_t last = pos, end = first.end;
  for (;;) {
    if (end >= text.size()) return end;
    const Char c = char_at(text, end);
    if (c.cls != CharClass::space) return last > pos ? last : end;
    last = end;
    end = c.end;
  }
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  for_each_gpt2_piece(text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

}  // namespace tide::text
