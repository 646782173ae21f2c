// GPT-2's byte-level BPE tokenizer: the text is cut into pieces by GPT-2's pattern
// (text/pretokenize.h), each piece's bytes become the symbols of GPT-2's byte alphabet, and
// the merges are applied by rank as GPT-2's reference encoder applies them: the pair of
// lowest rank, all its occurrences left to right, then again. Ids equal the reference's for
// any bytes (tests/text/bpe_golden.h); decode returns the bytes, so decode(encode(s)) == s
// also for invalid UTF-8 (the reference would decode those with replacement characters).
// Not done here: special tokens in text ("<|endoftext|>" in a text is encoded as its
// characters, as the reference does; append token_id("<|endoftext|>") yourself), other
// tokenizers' files.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/tokenizer.h"

namespace tide::text {

// Token (in the byte alphabet, UTF-8) and its id, as in encoder.json.
using BpeVocabulary = std::vector<std::pair<std::string, int32_t>>;
// Merge rules (two tokens in the byte alphabet), highest priority first, as in vocab.bpe.
using BpeMerges = std::vector<std::pair<std::string, std::string>>;

// The character (as UTF-8) that stands for byte `b` in GPT-2's tokens: printable Latin-1
// bytes stand for themselves, the other 68 for U+0100 onwards (the space is "Ġ", U+0120).
std::string gpt2_byte_symbol(uint8_t b);

// Movable, not copyable (it owns its cache).
class BpeTokenizer final : public Tokenizer {
 public:
  // From a vocabulary and merges in memory. Throws "[bpe]" when a token is empty or has a
  // character outside the byte alphabet, an id is negative or repeated, one of the 256
  // byte symbols is missing, a merge repeats an earlier one, or a merge's parts or result
  // are not in the vocabulary.
  BpeTokenizer(const BpeVocabulary& vocabulary, const BpeMerges& merges);
  // GPT-2's encoder.json and vocab.bpe (text/gpt2_files.h). Throws "[bpe] <path>: ..." for
  // a file that is missing or malformed, and as the constructor.
  static BpeTokenizer from_files(const std::string& encoder_json, const std::string& vocab_bpe);
  // dir/encoder.json and dir/vocab.bpe (scripts/fetch_text_data.sh puts them in
  // .data/text/gpt2).
  static BpeTokenizer from_dir(const std::string& dir);

  // Never throws tide::Error: every byte has a token. Thread-safe (a shared cache of pieces
  // seen before, bounded in size).
  std::vector<int32_t> encode(std::string_view text) const override;
  // Throws "[bpe]" for an id that names no token.
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return int64_t(bytes_of_.size()); }
  std::string name() const override { return "gpt2"; }

  // The id of a token written in the byte alphabet ("Ġthe", "<|endoftext|>"), if any.
  std::optional<int32_t> token_id(std::string_view token) const;
  // The ids of one piece, by the merges alone (no pre-tokenization, no cache).
  std::vector<int32_t> merge_piece(std::string_view piece) const;
  // Pieces in the cache now (at most kCacheEntries).
  size_t cache_size() const;
  static constexpr size_t kCacheEntries = 1 << 16;
  // Longer pieces are merged every time instead of cached.
  static constexpr size_t kCacheMaxPiece = 128;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  struct Cache {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> pieces;
  };
  void append_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> id_of_;            // byte-alphabet form -> id
  std::vector<std::string> bytes_of_;                         // id -> bytes ("" where no token)
  std::array<int32_t, 256> byte_id_{};                        // byte -> id of its one-byte token
  std::unordered_map<uint64_t, Merge> merges_;                // (left id << 32 | right id) -> merge
  std::unique_ptr<Cache> cache_ = std::make_unique<Cache>();  // a pointer: movable tokenizer
};

}  // namespace tide::text
