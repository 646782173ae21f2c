// text/pretokenize.h: GPT-2's pattern by hand. The pieces of every golden text match those
// the Python regex module found (tests/text/bpe_golden.h, no vocabulary files needed), a few
// cases are spelled out, and pieces of random bytes always cover the input exactly.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "bpe_golden.h"
#include "text/pretokenize.h"

using namespace tide::text;

namespace {

std::vector<std::string> pieces(std::string_view s) {
  std::vector<std::string> out;
  for (std::string_view p : gpt2_pretokenize(s)) out.emplace_back(p);
  return out;
}
using Pieces = std::vector<std::string>;

}  // namespace

TEST(Pretokenize, MatchesTheReferenceOnEveryGoldenText) {
  for (const auto& c : golden::kBpeCases) {
    std::vector<size_t> ends;
    size_t pos = 0;
    for (std::string_view p : gpt2_pretokenize(c.text)) {
      EXPECT_EQ(p.data(), c.text.data() + pos) << c.name;
      pos += p.size();
      ends.push_back(pos);
    }
    EXPECT_EQ(ends, c.piece_ends) << c.name;
  }
}

TEST(Pretokenize, Alternatives) {
  EXPECT_EQ(pieces("Hello world"), (Pieces{"Hello", " world"}));
  // Contractions are lower case only, and win over a longer word.
  EXPECT_EQ(pieces("don't I'LL 'sup"), (Pieces{"don", "'t", " I", "'", "LL", " '", "sup"}));
  EXPECT_EQ(pieces("we're we've"), (Pieces{"we", "'re", " we", "'ve"}));
  // Numbers and punctuation take one leading space each; runs stay whole.
  EXPECT_EQ(pieces("x 123.45 ?!"), (Pieces{"x", " 123", ".", "45", " ?!"}));
  // White space before a word: all but the last character, which goes with the word.
  EXPECT_EQ(pieces("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(pieces("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces("a \n b"), (Pieces{"a", " \n", " b"}));
  // At the end, the whole run.
  EXPECT_EQ(pieces("end   "), (Pieces{"end", "   "}));
  EXPECT_EQ(pieces("   "), (Pieces{"   "}));
  EXPECT_EQ(pieces(""), Pieces{});
  // Letters of any script, numbers of any script, a space before a non-letter symbol.
  EXPECT_EQ(pieces("caf\xc3\xa9 \xd9\xa3\xd9\xa4 \xf0\x9f\x9a\x80"),
            (Pieces{"caf\xc3\xa9", " \xd9\xa3\xd9\xa4", " \xf0\x9f\x9a\x80"}));
  // Invalid bytes are "other" characters: they join a run of punctuation.
  EXPECT_EQ(pieces("a\xff\xfe!b \x80x"), (Pieces{"a", "\xff\xfe!", "b", " \x80", "x"}));
}

TEST(Pretokenize, PiecesCoverRandomBytes) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab 1'\n\t.!s\xc3\xa9\xe2\x80\x99\xff\x80";
  for (int trial = 0; trial < 500; ++trial) {
    std::string s(size_t(rng() % 64), '\0');
    for (char& ch : s) ch = trial % 2 ? char(rng() % 256) : alphabet[rng() % alphabet.size()];
    std::string joined;
    for (std::string_view p : gpt2_pretokenize(s)) {
      ASSERT_FALSE(p.empty());
      joined += p;
    }
    ASSERT_EQ(joined, s);
  }
}
