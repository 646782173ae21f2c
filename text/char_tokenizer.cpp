// CharTokenizer (see char_tokenizer.h).
#include "text/char_tokenizer.h"

#include <cctype>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "text/read_file.h"

namespace tide::text {

namespace {

constexpr const char* kOp = "char_tokenizer";
constexpr std::string_view kMagic = "tide-char-vocab 1\n";

// "0x41 ('A')", or "0x0a" for a byte that does not print.
std::string describe_byte(unsigned char b) {
  char buf[16];
  if (b >= 0x20 && b < 0x7F) std::snprintf(buf, sizeof buf, "0x%02x ('%c')", b, b);
  else std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

}  // namespace

CharTokenizer CharTokenizer::from_corpus(std::string_view corpus) {
  TIDE_CHECK(!corpus.empty(), kOp, "the corpus is empty: no vocabulary to build");
  std::array<bool, 256> seen{};
  for (unsigned char b : corpus) seen[b] = true;
  std::string vocab;
  for (int b = 0; b < 256; ++b)
    if (seen[b]) vocab.push_back(char(b));
  return CharTokenizer(std::move(vocab));
}

CharTokenizer::CharTokenizer(std::string vocab) : CharTokenizer(std::move(vocab), "") {}

CharTokenizer::CharTokenizer(std::string vocab, const std::string& where)
    : vocab_(std::move(vocab)) {
  TIDE_CHECK(!vocab_.empty(), kOp, where, "the vocabulary is empty");
  id_of_.fill(-1);
  for (size_t i = 0; i < vocab_.size(); ++i) {
    const auto b = static_cast<unsigned char>(vocab_[i]);
    TIDE_CHECK(i == 0 || b > static_cast<unsigned char>(vocab_[i - 1]), kOp, where,
               "the vocabulary must list distinct bytes in increasing order, but byte ",
               describe_byte(b), " at index ", i, " follows ",
               describe_byte(static_cast<unsigned char>(vocab_[i - 1])));
    id_of_[b] = int32_t(i);
  }
}

std::vector<int32_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    const int32_t id = id_of_[b];
    TIDE_CHECK(id >= 0, kOp, "byte ", describe_byte(b), " at offset ", i,
               " is not in the vocabulary of ", vocab_.size(), " bytes");
    ids[i] = id;
  }
  return ids;
}

std::string CharTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    TIDE_CHECK(ids[i] >= 0 && ids[i] < int32_t(vocab_.size()), kOp, "id ", ids[i], " at index ", i,
               " is outside the vocabulary [0, ", vocab_.size(), ")");
    out[i] = vocab_[size_t(ids[i])];
  }
  return out;
}

void CharTokenizer::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TIDE_CHECK(out, kOp, path, ": cannot be written");
  out << kMagic << vocab_;
  out.flush();
  TIDE_CHECK(out, kOp, path, ": cannot be written");
}

CharTokenizer CharTokenizer::load(const std::string& path) {
  const std::string bytes = read_file(path, kOp);
  TIDE_CHECK(std::string_view(bytes).starts_with(kMagic), kOp, path,
             ": not a character vocabulary (it does not start with \"tide-char-vocab 1\")");
  return CharTokenizer(bytes.substr(kMagic.size()), path + ": ");
}

}  // namespace tide::text
