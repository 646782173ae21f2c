// GPT-2's pre-tokenizer, written out by hand over UTF-8: the pieces that the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// finds, left to right, as the Python regex module finds them in GPT-2's reference encoder.
// Byte-exact for any input: invalid UTF-8 bytes are "other" characters (text/unicode.h),
// so the pieces always cover the whole text. BPE then runs on each piece (text/bpe.h).
// Not done here: special tokens such as <|endoftext|> are text like any other.
#pragma once

#include <string_view>
#include <vector>

namespace tide::text {

// Calls fn(piece) for each piece of `text` in order (views into `text`; they concatenate to
// `text`). Uses no memory of its own.
template <class Fn>
void for_each_gpt2_piece(std::string_view text, Fn&& fn);

// The pieces of `text`, in order. Throws nothing but std::bad_alloc.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

namespace detail {
// The end (a byte offset) of the piece that starts at byte `pos` < text.size().
size_t gpt2_piece_end(std::string_view text, size_t pos);
}  // namespace detail

template <class Fn>
void for_each_gpt2_piece(std::string_view text, Fn&& fn) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = detail::gpt2_piece_end(text, pos);
    fn(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace tide::text
