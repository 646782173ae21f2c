// A small byte-level BPE vocabulary for tests and the BPE fuzzer, independent of GPT-2's
// files: the 256 byte tokens (id = byte) and merges over a, b, c, d, space and é that include
// the reference's trickiest case: "abc" is made by two merges (a+bc, rank 2, and ab+c, rank
// 4) with abc+ab (rank 3) between them, so merging "abcabc" must finish the rank-4 round
// before the rank-3 pair it creates is considered.
#pragma once

#include <string>
#include <utility>

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

}  // namespace tide::test_util
