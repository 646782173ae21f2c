// text/bpe.h: byte-level BPE. On a toy vocabulary (always): merges against a literal
// transcription of the reference algorithm, round trips of any bytes, the cache, threads and
// every construction error. On GPT-2's files (when fetched): the golden encodings of
// tests/text/bpe_golden.h and round trips of random bytes and the Shakespeare corpus.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bpe_golden.h"
#include "error_of.h"
#include "text/bpe.h"
#include "text/pretokenize.h"
#include "text_data.h"
#include "toy_bpe.h"

using namespace tide;
using namespace tide::text;
using tide::test_util::error_of;

namespace {

BpeTokenizer toy() {
  auto [vocab, merges] = test_util::toy_bpe();
  return BpeTokenizer(vocab, merges);
}

std::string random_bytes(std::mt19937& rng, size_t max_len) {
  std::string s(size_t(rng() % (max_len + 1)), '\0');
  for (char& c : s) c = char(rng() % 256);
  return s;
}

const std::string kSpace = gpt2_byte_symbol(' ');

}  // namespace

TEST(BpeAlphabet, Gpt2sByteSymbols) {
  EXPECT_EQ(gpt2_byte_symbol('A'), "A");
  EXPECT_EQ(gpt2_byte_symbol('!'), "!");
  EXPECT_EQ(gpt2_byte_symbol(0xE9), "\xc3\xa9");  // printable Latin-1: itself (é)
  EXPECT_EQ(gpt2_byte_symbol(0), "\xc4\x80");     // U+0100
  EXPECT_EQ(gpt2_byte_symbol(' '), "\xc4\xa0");   // U+0120, "Ġ"
  EXPECT_EQ(gpt2_byte_symbol('\n'), "\xc4\x8a");  // U+010A, "Ċ"
  EXPECT_EQ(gpt2_byte_symbol(0xAD), "\xc5\x83");  // soft hyphen: the last, U+0143
  std::set<std::string> all;
  for (int b = 0; b < 256; ++b) all.insert(gpt2_byte_symbol(uint8_t(b)));
  EXPECT_EQ(all.size(), 256u);
}

TEST(BpeToy, MergesByRankInRounds) {
  BpeTokenizer tok = toy();
  auto id = [&](const std::string& t) { return *tok.token_id(t); };
  EXPECT_EQ(tok.merge_piece("abcd"), (std::vector<int32_t>{id("abcd")}));
  // The rank-4 round (ab+c) merges both occurrences before abc+ab (rank 3) is looked at.
  EXPECT_EQ(tok.merge_piece("abcabc"), (std::vector<int32_t>{id("abc"), id("abc")}));
  // Overlapping occurrences go left to right: aaa -> aa a.
  EXPECT_EQ(tok.merge_piece("aaa"), (std::vector<int32_t>{id("aa"), 'a'}));
  EXPECT_EQ(tok.merge_piece("aaaa"), (std::vector<int32_t>{id("aaaa")}));
  EXPECT_EQ(tok.merge_piece("ddddd"), (std::vector<int32_t>{id("dd"), id("ddd")}));
  EXPECT_EQ(tok.merge_piece("x"), (std::vector<int32_t>{'x'}));
  EXPECT_EQ(tok.merge_piece(""), std::vector<int32_t>{});
  // a+b (rank 0) before space+a (rank 7): " ab" is two tokens, " aab" one (aa first).
  EXPECT_EQ(tok.encode(" ab  \xc3\xa9"),
            (std::vector<int32_t>{' ', id("ab"), ' ', id(kSpace + "\xc3\x83\xc2\xa9")}));
  EXPECT_EQ(tok.encode(" a"), (std::vector<int32_t>{id(kSpace + "a")}));
}

TEST(BpeToy, MatchesTheReferenceLoopOnRandomPieces) {
  auto [vocab, merges] = test_util::toy_bpe();
  BpeTokenizer tok(vocab, merges);
  std::mt19937 rng(11);
  const std::string alphabet = "abcd ab\xc3\xa9";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string piece(size_t(rng() % 24), '\0');
    for (char& c : piece) c = alphabet[rng() % alphabet.size()];
    ASSERT_EQ(tok.merge_piece(piece), test_util::reference_merge(vocab, merges, piece)) << piece;
  }
}

TEST(BpeToy, RoundTripsAnyBytes) {
  BpeTokenizer tok = toy();
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string s = random_bytes(rng, 200);
    ASSERT_EQ(tok.decode(tok.encode(s)), s);
  }
  // Long pieces (not cached) merge too: a run of 5000 letters and one of 3000 spaces.
  const std::string long_text = std::string(5000, 'a') + std::string(3000, ' ') + "abcabc";
  EXPECT_EQ(tok.decode(tok.encode(long_text)), long_text);
  EXPECT_EQ(tok.encode(std::string(5000, 'a')), std::vector<int32_t>(1250, *tok.token_id("aaaa")));
}

TEST(BpeToy, CacheIsSharedAndBounded) {
  BpeTokenizer tok = toy();
  EXPECT_EQ(tok.cache_size(), 0u);
  const std::vector<int32_t> first = tok.encode("abc abd abc");
  EXPECT_EQ(tok.cache_size(), 3u);  // "abc", " abd", " abc"
  EXPECT_EQ(tok.encode("abc abd abc"), first);
  EXPECT_EQ(tok.cache_size(), 3u);
  // More distinct pieces than the cache holds: it is emptied and refilled, never larger.
  std::string many;
  for (size_t i = 0; i < BpeTokenizer::kCacheEntries + 1000; ++i) many += " " + std::to_string(i);
  const std::vector<int32_t> ids = tok.encode(many);
  EXPECT_LE(tok.cache_size(), BpeTokenizer::kCacheEntries);
  EXPECT_GT(tok.cache_size(), 0u);
  EXPECT_EQ(tok.decode(ids), many);
  // Pieces longer than kCacheMaxPiece are not kept.
  BpeTokenizer fresh = toy();
  fresh.encode(std::string(BpeTokenizer::kCacheMaxPiece + 1, 'b'));
  EXPECT_EQ(fresh.cache_size(), 0u);
}

TEST(BpeToy, EncodesFromSeveralThreads) {
  BpeTokenizer tok = toy();
  std::mt19937 rng(9);
  std::vector<std::string> texts;
  for (int i = 0; i < 8; ++i) texts.push_back(random_bytes(rng, 2000) + " abcd abcabc aaaa");
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) want.push_back(toy().encode(t));
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      int good = 0;
      for (int round = 0; round < 20; ++round)
        for (size_t i = 0; i < texts.size(); ++i) good += tok.encode(texts[i]) == want[i];
      ok[size_t(t)] = good;
    });
  for (auto& th : threads) th.join();
  for (int good : ok) EXPECT_EQ(good, 20 * 8);
}

TEST(BpeToy, MovesAndServesAsATokenizer) {
  BpeTokenizer tok = toy();
  const std::vector<int32_t> want = tok.encode("abcd abcabc");
  BpeTokenizer moved = std::move(tok);
  EXPECT_EQ(moved.encode("abcd abcabc"), want);
  std::unique_ptr<Tokenizer> any = std::make_unique<BpeTokenizer>(std::move(moved));
  EXPECT_EQ(any->encode("abcd abcabc"), want);
  EXPECT_EQ(any->name(), "gpt2");
  EXPECT_EQ(any->decode(want), "abcd abcabc");
}

TEST(BpeToy, SpecialTokensAreOnlyIds) {
  BpeTokenizer tok = toy();
  const std::optional<int32_t> eot = tok.token_id("<|endoftext|>");
  ASSERT_TRUE(eot.has_value());
  EXPECT_EQ(*eot, tok.vocab_size() - 1);
  const std::vector<int32_t> ids{'a', *eot};
  EXPECT_EQ(tok.decode(ids), "a<|endoftext|>");
  // In text it is characters, as in the reference.
  EXPECT_EQ(tok.decode(tok.encode("<|endoftext|>")), "<|endoftext|>");
  EXPECT_GT(tok.encode("<|endoftext|>").size(), 1u);
  EXPECT_FALSE(tok.token_id("zzz").has_value());
}

TEST(BpeToy, DecodeErrors) {
  BpeTokenizer tok = toy();
  const std::vector<int32_t> past{'a', int32_t(tok.vocab_size())};
  EXPECT_EQ(error_of([&] { tok.decode(past); }),
            "[bpe] id " + std::to_string(tok.vocab_size()) +
                " at index 1 names no token (the vocabulary has " +
                std::to_string(tok.vocab_size()) + " ids)");
  const std::vector<int32_t> negative{-5};
  EXPECT_NE(error_of([&] { tok.decode(negative); }).find("id -5 at index 0"), std::string::npos);
  // A gap in the ids names no token either.
  BpeVocabulary v = test_util::toy_bpe().first;
  v.emplace_back("zz", 1000);
  BpeTokenizer gappy(v, {});
  EXPECT_EQ(gappy.vocab_size(), 1001);
  const std::vector<int32_t> gap{999};
  EXPECT_NE(error_of([&] { gappy.decode(gap); }).find("id 999 at index 0 names no token"),
            std::string::npos);
}

TEST(BpeToy, ConstructionErrors) {
  const auto toy_files = test_util::toy_bpe();
  const BpeVocabulary& vocab = toy_files.first;  // captured below: no structured binding
  const BpeMerges& merges = toy_files.second;
  auto with = [&](auto edit) {
    BpeVocabulary v = vocab;
    BpeMerges m = merges;
    edit(v, m);
    return error_of([&] { BpeTokenizer(v, m); });
  };
  EXPECT_EQ(with([](BpeVocabulary& v, BpeMerges&) { v.erase(v.begin() + 'q'); }),
            "[bpe] the vocabulary lacks the token of byte 113 (\"q\"), so some texts could not "
            "be encoded");
  EXPECT_EQ(with([](BpeVocabulary& v, BpeMerges&) { v.emplace_back("x y", 900); }),
            "[bpe] token \"x y\" (id 900) has a character outside GPT-2's byte alphabet");
  EXPECT_EQ(with([](BpeVocabulary& v, BpeMerges&) { v.emplace_back("\xc3\xa9\xff", 900); }),
            "[bpe] token \"\xc3\xa9\xff\" (id 900) has a character outside GPT-2's byte alphabet");
  EXPECT_EQ(with([](BpeVocabulary& v, BpeMerges&) { v.emplace_back("", 900); }),
            "[bpe] the vocabulary has an empty token (id 900)");
  EXPECT_EQ(with([](BpeVocabulary& v, BpeMerges&) { v.emplace_back("zq", -2); }),
            "[bpe] token \"zq\" has the negative id -2");
  EXPECT_EQ(with([](BpeVocabulary& v, BpeMerges&) { v.emplace_back("zq", 7); }),
            "[bpe] id 7 is given to two tokens");
  EXPECT_EQ(with([](BpeVocabulary& v, BpeMerges&) { v.emplace_back("a", 901); }),
            "[bpe] token \"a\" is listed twice");
  EXPECT_EQ(with([](BpeVocabulary&, BpeMerges& m) { m.emplace_back("x", "y"); }),
            "[bpe] merge 18 (\"x\" \"y\"): \"xy\" is not in the vocabulary");
  EXPECT_EQ(with([](BpeVocabulary&, BpeMerges& m) { m.emplace_back("xy", "a"); }),
            "[bpe] merge 18 (\"xy\" \"a\"): \"xy\" is not in the vocabulary");
  EXPECT_EQ(with([](BpeVocabulary&, BpeMerges& m) { m.emplace_back("a", "b"); }),
            "[bpe] merge 18 (\"a\" \"b\") repeats merge 0");
  EXPECT_NE(error_of([] {
              BpeTokenizer::from_dir("/nonexistent");
            }).find("[bpe] /nonexistent/encoder.json: no such file"),
            std::string::npos);
}

class Gpt2Bpe : public ::testing::Test {
 protected:
  static const BpeTokenizer* tokenizer() {
    static const BpeTokenizer* tok = [] {
      const std::string dir = test_util::text_data_dir() + "/gpt2";
      return test_util::text_data_file("gpt2/encoder.json").empty() ||
                     test_util::text_data_file("gpt2/vocab.bpe").empty()
                 ? nullptr
                 : new BpeTokenizer(BpeTokenizer::from_dir(dir));
    }();
    return tok;
  }
  void SetUp() override {
    TIDE_REQUIRE_TEXT_DATA(encoder, "gpt2/encoder.json");
    TIDE_REQUIRE_TEXT_DATA(vocab, "gpt2/vocab.bpe");
  }
};

TEST_F(Gpt2Bpe, GoldenEncodings) {
  const BpeTokenizer& tok = *tokenizer();
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.name(), "gpt2");
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  ASSERT_GE(golden::kBpeCases.size(), 30u);
  for (const auto& c : golden::kBpeCases) {
    EXPECT_EQ(tok.encode(c.text), c.ids) << c.name;
    EXPECT_EQ(tok.decode(c.ids), c.text) << c.name;
  }
}

TEST_F(Gpt2Bpe, SpecialTokenAndPieces) {
  const BpeTokenizer& tok = *tokenizer();
  EXPECT_EQ(tok.token_id("<|endoftext|>"), std::optional<int32_t>(50256));
  EXPECT_EQ(tok.token_id(kSpace + "the"), std::optional<int32_t>(262));
  const std::vector<int32_t> eot{50256};
  EXPECT_EQ(tok.decode(eot), "<|endoftext|>");
  // encode is pre-tokenization plus merge_piece on each piece.
  const std::string text = "It's 2024: na\xc3\xafve  caf\xc3\xa9s, \xf0\x9f\x9a\x80!";
  std::vector<int32_t> by_pieces;
  for (std::string_view p : gpt2_pretokenize(text)) {
    std::vector<int32_t> ids = tok.merge_piece(p);
    by_pieces.insert(by_pieces.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(tok.encode(text), by_pieces);
}

TEST_F(Gpt2Bpe, RoundTripsRandomBytes) {
  const BpeTokenizer& tok = *tokenizer();
  std::mt19937 rng(17);
  for (int trial = 0; trial < 200; ++trial) {
    const std::string s = random_bytes(rng, 300);
    const std::vector<int32_t> ids = tok.encode(s);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < 50257);
    ASSERT_EQ(tok.decode(ids), s);
  }
}

TEST_F(Gpt2Bpe, ShakespeareRoundTrip) {
  TIDE_REQUIRE_TEXT_DATA(path, "shakespeare.txt");
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  text.resize(300'000);  // the first plays: enough words, quick under the sanitizers
  const std::vector<int32_t> ids = tokenizer()->encode(text);
  EXPECT_EQ(tokenizer()->decode(ids), text);
  // English verse takes about 0.3 tokens per byte in GPT-2's vocabulary.
  EXPECT_GT(ids.size(), text.size() / 6);
  EXPECT_LT(ids.size(), text.size() / 2);
}
