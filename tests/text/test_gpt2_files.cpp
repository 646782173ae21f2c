// text/gpt2_files.h: encoder.json and vocab.bpe from text (escapes, every malformed case)
// and, when fetched, from GPT-2's own files.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "error_of.h"
#include "text/gpt2_files.h"
#include "text_data.h"

using namespace tide;
using namespace tide::text;
using tide::test_util::error_of;

TEST(Gpt2Encoder, ParsesAnObjectOfIds) {
  BpeVocabulary v = parse_gpt2_encoder(R"({"a": 0, "\u0120the": 1, "\"q\\": 2})", "enc");
  ASSERT_EQ(v.size(), 3u);
  std::sort(v.begin(), v.end(), [](auto& x, auto& y) { return x.second < y.second; });
  EXPECT_EQ(v[0], (std::pair<std::string, int32_t>{"a", 0}));
  EXPECT_EQ(v[1], (std::pair<std::string, int32_t>{"\xc4\xa0the", 1}));  // U+0120 in UTF-8
  EXPECT_EQ(v[2], (std::pair<std::string, int32_t>{"\"q\\", 2}));
  // A surrogate pair is one code point (U+1F680).
  v = parse_gpt2_encoder(R"({"\ud83d\ude80": 2147483647})", "enc");
  EXPECT_EQ(v.at(0), (std::pair<std::string, int32_t>{"\xf0\x9f\x9a\x80", 2147483647}));
  EXPECT_TRUE(parse_gpt2_encoder("{}", "enc").empty());
}

TEST(Gpt2Encoder, Errors) {
  EXPECT_NE(error_of([] {
              parse_gpt2_encoder(R"({"a": 0)", "enc.json");
            }).find("[bpe] enc.json: not JSON: "),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_gpt2_encoder(R"({"\ud83d": 0})", "e"); }).find("not JSON"),
            std::string::npos);  // a lone surrogate
  EXPECT_EQ(error_of([] { parse_gpt2_encoder("[1, 2]", "e"); }),
            "[bpe] e: expected a JSON object of token -> id, not a value of type array");
  EXPECT_EQ(error_of([] { parse_gpt2_encoder(R"({"a": -1})", "e"); }),
            "[bpe] e: the id of \"a\" is not an integer in [0, 2^31): -1");
  EXPECT_EQ(error_of([] { parse_gpt2_encoder(R"({"a": 1.5})", "e"); }),
            "[bpe] e: the id of \"a\" is not an integer in [0, 2^31): 1.5");
  EXPECT_EQ(error_of([] { parse_gpt2_encoder(R"({"a": 2147483648})", "e"); }),
            "[bpe] e: the id of \"a\" is not an integer in [0, 2^31): 2147483648");
  EXPECT_EQ(error_of([] { parse_gpt2_encoder(R"({"a": "1"})", "e"); }),
            "[bpe] e: the id of \"a\" is not an integer in [0, 2^31): \"1\"");
  EXPECT_EQ(error_of([] { read_gpt2_encoder("/nonexistent/encoder.json"); }),
            "[bpe] /nonexistent/encoder.json: no such file");
}

TEST(Gpt2Merges, ParsesLines) {
  const BpeMerges want = {{"\xc4\xa0", "t"}, {"a", "b"}};
  EXPECT_EQ(parse_gpt2_merges("#version: 0.2\n\xc4\xa0 t\na b\n", "m"), want);
  EXPECT_EQ(parse_gpt2_merges("\xc4\xa0 t\na b", "m"), want);  // no header, no final newline
  EXPECT_TRUE(parse_gpt2_merges("#version: 0.2\n", "m").empty());
  EXPECT_TRUE(parse_gpt2_merges("", "m").empty());
}

TEST(Gpt2Merges, Errors) {
  EXPECT_EQ(error_of([] { parse_gpt2_merges("#version: 0.2\na b\n\nc d\n", "vocab.bpe"); }),
            "[bpe] vocab.bpe: line 3: expected two symbols separated by one space, got \"\"");
  EXPECT_EQ(error_of([] { parse_gpt2_merges("a b c\n", "m"); }),
            "[bpe] m: line 1: expected two symbols separated by one space, got \"a b c\"");
  EXPECT_NE(error_of([] { parse_gpt2_merges("ab\n", "m"); }).find("line 1"), std::string::npos);
  EXPECT_NE(error_of([] { parse_gpt2_merges(" b\n", "m"); }).find("line 1"), std::string::npos);
  EXPECT_NE(error_of([] { parse_gpt2_merges("a \n", "m"); }).find("line 1"), std::string::npos);
  EXPECT_NE(error_of([] { parse_gpt2_merges("a  b\n", "m"); }).find("line 1"), std::string::npos);
  // A version line is only skipped first; later, "#version: 0.2" is a merge like any other.
  EXPECT_EQ(parse_gpt2_merges("a b\n#version: 0.2\n", "m"),
            (BpeMerges{{"a", "b"}, {"#version:", "0.2"}}));
  // Long lines are cut in the message.
  const std::string text = std::string(200, 'x') + "\n";
  EXPECT_EQ(error_of([&] { parse_gpt2_merges(text, "m"); }),
            "[bpe] m: line 1: expected two symbols separated by one space, got \"" +
                std::string(77, 'x') + "...\"");
  EXPECT_EQ(error_of([] { read_gpt2_merges("/nonexistent/vocab.bpe"); }),
            "[bpe] /nonexistent/vocab.bpe: no such file");
}

TEST(Gpt2Files, ReadsGpt2sOwnFiles) {
  TIDE_REQUIRE_TEXT_DATA(encoder, "gpt2/encoder.json");
  TIDE_REQUIRE_TEXT_DATA(merges_path, "gpt2/vocab.bpe");
  const BpeVocabulary v = read_gpt2_encoder(encoder);
  EXPECT_EQ(v.size(), 50257u);
  const BpeMerges m = read_gpt2_merges(merges_path);
  ASSERT_EQ(m.size(), 50000u);
  EXPECT_EQ(m.front(), (std::pair<std::string, std::string>{"\xc4\xa0", "t"}));
}
