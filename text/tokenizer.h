// The interface every tokenizer of text/ offers, so that a corpus and a command can take
// either (CharTokenizer: one token per byte; BpeTokenizer: GPT-2's byte-level BPE).
// Not done here: training a vocabulary, special tokens inside text.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tide::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The ids of `text` (any bytes). Throws tide::Error when the tokenizer cannot encode them
  // (CharTokenizer: a byte outside its vocabulary).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The bytes of `ids`; decode(encode(s)) == s. Throws tide::Error for an id outside the
  // vocabulary.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // One past the largest id: the rows an embedding of the ids needs.
  virtual int64_t vocab_size() const = 0;
  // "char" or "gpt2": what messages and summaries call it.
  virtual std::string name() const = 0;
};

}  // namespace tide::text
