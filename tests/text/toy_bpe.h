// A small byte-level BPE vocabulary for tests and the BPE fuzzer, independent of GPT-2's
// files: the 256 byte tokens (id = byte) and merges over a, b, c, d, space and é that include
// the reference's trickiest case: "abc" is made by two merges (a+bc, rank 2, and ab+c, rank
// 4) with abc+ab (rank 3) between them, so merging "abcabc" must finish the rank-4 round
// before the rank-3 pair it creates is considered. Also the reference's merge loop,
// transcribed, to check BpeTokenizer::merge_piece against.
#pragma once

#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/bpe.h"

namespace tide::test_util {

inline std::pair<text::BpeVocabulary, text::BpeMerges> toy_bpe() {
  text::BpeVocabulary vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace_back(text::gpt2_byte_symbol(uint8_t(b)), b);
  const std::string sp = text::gpt2_byte_symbol(' ');
  const std::string e1 = text::gpt2_byte_symbol(0xC3), e2 = text::gpt2_byte_symbol(0xA9);
  text::BpeMerges merges = {
      {"a", "b"},    {"b", "c"},       {"a", "bc"},        {"abc", "ab"},   {"ab", "c"},
      {"a", "a"},    {"aa", "aa"},     {sp, "a"},          {sp + "a", "b"}, {"d", "d"},
      {"dd", "d"},   {sp, sp},         {sp + sp, sp + sp}, {"c", "a"},      {e1, e2},
      {sp, e1 + e2}, {"abcd", "abcd"}, {"abc", "d"},
  };
  int32_t next = 256;
  for (const auto& [l, r] : merges) {
    bool known = false;
    for (const auto& [t, id] : vocab) known = known || t == l + r;
    if (!known) vocab.emplace_back(l + r, next++);
  }
  vocab.emplace_back("<|endoftext|>", next);
  return {vocab, merges};
}

// The reference's merge loop, transcribed: the lowest-ranked pair among the current
// symbols, every occurrence left to right, until no pair has a rank. Slow (O(n^2) per
// piece, a linear search per token): for short pieces.
inline std::vector<int32_t> reference_merge(const text::BpeVocabulary& vocab,
                                            const text::BpeMerges& merges, std::string_view piece) {
  std::map<std::pair<std::string, std::string>, size_t> rank;
  for (size_t i = 0; i < merges.size(); ++i) rank.emplace(merges[i], i);
  std::vector<std::string> word;
  for (char c : piece) word.push_back(text::gpt2_byte_symbol(static_cast<unsigned char>(c)));
  while (word.size() > 1) {
    size_t best = std::numeric_limits<size_t>::max();
    std::pair<std::string, std::string> pair;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = rank.find({word[i], word[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, pair = it->first;
    }
    if (best == std::numeric_limits<size_t>::max()) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == pair.first && word[i + 1] == pair.second) {
        next.push_back(word[i] + word[i + 1]);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word = std::move(next);
  }
  std::vector<int32_t> ids;
  for (const std::string& t : word)
    for (const auto& [token, id] : vocab)
      if (token == t) ids.push_back(id);
  return ids;
}

}  // namespace tide::test_util
