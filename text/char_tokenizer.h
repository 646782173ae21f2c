// The character-level tokenizer of small GPTs: one token per distinct byte of a corpus.
// Bytes, not code points: any input encodes (invalid UTF-8 too) and decode(encode(s)) == s
// byte for byte; a character of several UTF-8 bytes takes several tokens (the Shakespeare
// corpus of scripts/fetch_text_data.sh is ASCII, 84 distinct bytes).
// Not done here: code points, unknown-byte fallbacks.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"

namespace tide::text {

class CharTokenizer final : public Tokenizer {
 public:
  // The vocabulary of the distinct bytes of `corpus`, in increasing byte order: id i stands
  // for the i-th smallest byte. Throws "[char_tokenizer]" for an empty corpus.
  static CharTokenizer from_corpus(std::string_view corpus);
  // An explicit vocabulary: distinct bytes in increasing order (what vocab() returns).
  // Throws "[char_tokenizer]" when it is empty, unsorted or repeats a byte.
  explicit CharTokenizer(std::string vocab);

  // Throws "[char_tokenizer] byte 0x.. ('c') at offset N is not in the vocabulary ..." for
  // the first byte of `text` outside the vocabulary.
  std::vector<int32_t> encode(std::string_view text) const override;
  // Throws "[char_tokenizer]" for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return int64_t(vocab_.size()); }
  std::string name() const override { return "char"; }
  // The bytes of the vocabulary in id order.
  const std::string& vocab() const { return vocab_; }

  // Writes the vocabulary to `path`: the line "tide-char-vocab 1", then the bytes in id
  // order (nothing else, no newline). Throws "[char_tokenizer]" when it cannot write.
  void save(const std::string& path) const;
  // Reads what save() wrote. Throws "[char_tokenizer] <path>: ..." for a missing or
  // unreadable file, another format, and the vocabulary errors of the constructor.
  static CharTokenizer load(const std::string& path);

 private:
  // `where` starts every message ("<path>: " from load).
  CharTokenizer(std::string vocab, const std::string& where);

  std::string vocab_;
  std::array<int32_t, 256> id_of_{};  // -1: not in the vocabulary
};

}  // namespace tide::text
