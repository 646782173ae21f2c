// libFuzzer target for the text corpus and its loader on arbitrary file contents. The
// first 4 bytes choose the batch (B = 1..8, T = 1..64), the prefetch depth (1..3) and the
// tokenizer (a CharTokenizer of all 256 bytes, one of the first half of the file, which
// then meets unknown bytes, or the toy BPE of tests/text/toy_bpe.h); the rest is written
// to a file that TextCorpus::from_file reads. Three batches of each split that is long
// enough are taken and every window is checked against the split's tokens at its offset.
// Allowed outcomes: success and tide::Error (an empty file, an unknown byte, a split
// shorter than T + 1); anything else is a finding.
// Not done here: GPU batches (the fake GPU is for tests).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tests/text/toy_bpe.h"
#include "text/bpe.h"
#include "text/char_tokenizer.h"
#include "text/corpus.h"

namespace {

using namespace tide::text;

// The input's file, removed again as soon as it is read, so no run leaves one behind.
const std::string& scratch_path() {
  static const std::string path = "/tmp/tide_fuzz_text_" + std::to_string(::getpid());
  return path;
}

std::shared_ptr<const TextCorpus> read_corpus(std::string_view content, const Tokenizer& tok) {
  {
    std::ofstream out(scratch_path(), std::ios::binary | std::ios::trunc);
    out.write(content.data(), std::streamsize(content.size()));
  }
  struct Remove {
    ~Remove() { std::remove(scratch_path().c_str()); }
  } remove;
  return std::make_shared<const TextCorpus>(TextCorpus::from_file(scratch_path(), tok));
}

void take_batches(const std::shared_ptr<const TextCorpus>& corpus, Split split, int64_t B,
                  int64_t T, int prefetch) {
  TextLoader loader(
      corpus, TextLoaderOptions().batch_size(B).block_size(T).prefetch(prefetch).split(split).seed(
                  uint64_t(B * 131 + T)));
  const std::span<const int32_t> tokens = corpus->split(split);
  for (uint64_t k = 0; k < 3; ++k) {
    const std::vector<int64_t> offsets = loader.offsets(k);
    tide::train::Batch b = loader.next();
    const std::vector<int64_t> x = b.x.to_vector<int64_t>(), y = b.y.to_vector<int64_t>();
    for (int64_t r = 0; r < B; ++r) {
      const int64_t o = offsets[size_t(r)];
      if (o < 0 || o + T + 1 > int64_t(tokens.size())) std::abort();
      for (int64_t t = 0; t < T; ++t)
        if (x[size_t(r * T + t)] != tokens[size_t(o + t)] ||
            y[size_t(r * T + t)] != tokens[size_t(o + t + 1)])
          std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const BpeTokenizer toy = [] {
    auto [vocab, merges] = tide::test_util::toy_bpe();
    return BpeTokenizer(vocab, merges);
  }();
  static const CharTokenizer all_bytes = [] {
    std::string bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(char(b));
    return CharTokenizer(bytes);
  }();
  if (size < 4) return 0;
  const int64_t B = 1 + data[0] % 8, T = 1 + data[1] % 64;
  const int prefetch = 1 + data[2] % 3;
  const std::string_view content(reinterpret_cast<const char*>(data + 4), size - 4);
  try {
    std::unique_ptr<CharTokenizer> half;
    const Tokenizer* tok = &all_bytes;
    if (data[3] % 3 == 1 && content.size() >= 2) {
      half = std::make_unique<CharTokenizer>(
          CharTokenizer::from_corpus(content.substr(0, content.size() / 2)));
      tok = half.get();
    } else if (data[3] % 3 == 2) {
      tok = &toy;
    }
    auto corpus = read_corpus(content, *tok);
    if (tok->decode(corpus->tokens()) != content) std::abort();
    for (Split split : {Split::train, Split::val}) {
      try {
        take_batches(corpus, split, B, T, prefetch);
      } catch (const tide::Error&) {
      }
    }
  } catch (const tide::Error&) {
  }
  return 0;
}
