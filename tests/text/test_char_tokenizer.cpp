// text/char_tokenizer.h: the byte vocabulary of a corpus, encode/decode round trips of any
// bytes, save/load, and each error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "error_of.h"
#include "text/char_tokenizer.h"
#include "text_data.h"

using namespace tide;
using namespace tide::text;
using tide::test_util::error_of;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("tide_char_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST(CharTokenizer, VocabularyIsTheSortedDistinctBytes) {
  CharTokenizer tok = CharTokenizer::from_corpus("hello, world\n");
  EXPECT_EQ(tok.vocab(), "\n ,dehlorw");
  EXPECT_EQ(tok.vocab_size(), 10);
  EXPECT_EQ(tok.name(), "char");
  EXPECT_EQ(tok.encode("hello"), (std::vector<int32_t>{5, 4, 6, 6, 7}));
  EXPECT_EQ(tok.encode(""), std::vector<int32_t>{});
  const std::vector<int32_t> ids{9, 7, 8, 6, 3, 1, 0};
  EXPECT_EQ(tok.decode(ids), "world \n");
}

TEST(CharTokenizer, RoundTripsAnyBytes) {
  std::mt19937 rng(3);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  CharTokenizer tok = CharTokenizer::from_corpus(all);
  ASSERT_EQ(tok.vocab_size(), 256);
  for (int trial = 0; trial < 50; ++trial) {
    std::string s(size_t(rng() % 300), '\0');
    for (char& c : s) c = char(rng() % 256);  // invalid UTF-8 and NUL included
    const std::vector<int32_t> ids = tok.encode(s);
    ASSERT_EQ(ids.size(), s.size());
    for (size_t i = 0; i < s.size(); ++i)
      ASSERT_EQ(ids[i], int32_t(static_cast<unsigned char>(s[i])));
    ASSERT_EQ(tok.decode(ids), s);
  }
}

TEST(CharTokenizer, Errors) {
  CharTokenizer tok = CharTokenizer::from_corpus("abc");
  EXPECT_EQ(error_of([&] { tok.encode("abz"); }),
            "[char_tokenizer] byte 0x7a ('z') at offset 2 is not in the vocabulary of 3 bytes");
  EXPECT_EQ(error_of([&] { tok.encode("a\xc3\xa9"); }),
            "[char_tokenizer] byte 0xc3 at offset 1 is not in the vocabulary of 3 bytes");
  const std::vector<int32_t> bad{0, 3};
  EXPECT_EQ(error_of([&] { tok.decode(bad); }),
            "[char_tokenizer] id 3 at index 1 is outside the vocabulary [0, 3)");
  const std::vector<int32_t> negative{-1};
  EXPECT_NE(error_of([&] { tok.decode(negative); }).find("id -1 at index 0"), std::string::npos);
  EXPECT_EQ(error_of([] { CharTokenizer::from_corpus(""); }),
            "[char_tokenizer] the corpus is empty: no vocabulary to build");
  EXPECT_EQ(error_of([] { CharTokenizer(""); }), "[char_tokenizer] the vocabulary is empty");
  EXPECT_EQ(error_of([] { CharTokenizer("ba"); }),
            "[char_tokenizer] the vocabulary must list distinct bytes in increasing order, but "
            "byte 0x61 ('a') at index 1 follows 0x62 ('b')");
  EXPECT_NE(error_of([] { CharTokenizer("aa"); }).find("distinct bytes"), std::string::npos);
}

TEST(CharTokenizer, SaveAndLoad) {
  const std::string path = temp_path("vocab");
  std::string corpus = "To be, or not to be\n";
  corpus.push_back('\0');
  corpus += "\xff\x80";
  CharTokenizer tok = CharTokenizer::from_corpus(corpus);
  tok.save(path);
  CharTokenizer back = CharTokenizer::load(path);
  EXPECT_EQ(back.vocab(), tok.vocab());
  EXPECT_EQ(back.encode(corpus), tok.encode(corpus));
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(bytes, "tide-char-vocab 1\n" + tok.vocab());

  write(path, "not a vocabulary");
  EXPECT_EQ(error_of([&] { CharTokenizer::load(path); }),
            "[char_tokenizer] " + path +
                ": not a character vocabulary (it does not start with \"tide-char-vocab 1\")");
  write(path, "tide-char-vocab 1\nzya");
  EXPECT_EQ(error_of([&] { CharTokenizer::load(path); }),
            "[char_tokenizer] " + path +
                ": the vocabulary must list distinct bytes in increasing order, but byte 0x79 "
                "('y') at index 1 follows 0x7a ('z')");
  write(path, "tide-char-vocab 1\n");
  EXPECT_EQ(error_of([&] { CharTokenizer::load(path); }),
            "[char_tokenizer] " + path + ": the vocabulary is empty");
  fs::remove(path);
  EXPECT_EQ(error_of([&] { CharTokenizer::load(path); }),
            "[char_tokenizer] " + path + ": no such file");
  EXPECT_EQ(error_of([&] { tok.save("/nonexistent-dir/vocab"); }),
            "[char_tokenizer] /nonexistent-dir/vocab: cannot be written");
}

TEST(CharTokenizer, ShakespeareCorpus) {
  TIDE_REQUIRE_TEXT_DATA(path, "shakespeare.txt");
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  CharTokenizer tok = CharTokenizer::from_corpus(text);
  // The fetched corpus is ASCII: 84 distinct bytes, newline first.
  EXPECT_EQ(tok.vocab_size(), 84);
  EXPECT_EQ(tok.vocab().front(), '\n');
  const std::vector<int32_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(tok.decode(ids), text);
}
