// libFuzzer target for GPT-2's byte-level BPE: any input is pre-tokenized, encoded and
// decoded with the toy vocabulary of tests/text/toy_bpe.h (always) and with GPT-2's own
// (when the data folder has it: $TIDE_TEXT_DATA, else the source tree's .data/text, which
// scripts/fuzz.sh fetches; without it a note goes to stderr once and only the toy runs).
// A finding: decode(encode(s)) != s, an id outside the vocabulary, pieces that do not cover
// s, the toy's merge_piece differing from the reference loop on a piece of up to 48 bytes,
// or any exception (encode throws nothing).
// Not done here: malformed vocabulary files (tests/text/test_gpt2_files.cpp covers them).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tests/text/toy_bpe.h"
#include "text/bpe.h"
#include "text/pretokenize.h"

namespace {

using tide::text::BpeTokenizer;

void fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "fuzz_bpe: %s (input of %zu bytes)\n", what, input.size());
  std::abort();
}

void check_round_trip(const BpeTokenizer& tok, std::string_view s) {
  const std::vector<int32_t> ids = tok.encode(s);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) fail("an id outside the vocabulary", s);
  if (tok.decode(ids) != s) fail("decode(encode(s)) != s", s);
}

struct Vocabularies {
  std::pair<tide::text::BpeVocabulary, tide::text::BpeMerges> toy_files;
  std::unique_ptr<BpeTokenizer> toy, gpt2;
  Vocabularies() : toy_files(tide::test_util::toy_bpe()) {
    toy = std::make_unique<BpeTokenizer>(toy_files.first, toy_files.second);
    const char* env = std::getenv("TIDE_TEXT_DATA");
    const std::string dir = std::string(env && *env ? env : TIDE_TEXT_DATA_DIR) + "/gpt2";
    if (std::filesystem::is_regular_file(dir + "/encoder.json") &&
        std::filesystem::is_regular_file(dir + "/vocab.bpe")) {
      gpt2 = std::make_unique<BpeTokenizer>(BpeTokenizer::from_dir(dir));
    } else {
      std::fprintf(stderr,
                   "fuzz_bpe: no GPT-2 files in %s (bash scripts/fetch_text_data.sh): "
                   "fuzzing the toy vocabulary only\n",
                   dir.c_str());
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Vocabularies v;
  const std::string_view s(reinterpret_cast<const char*>(data), size);
  size_t covered = 0;
  for (std::string_view piece : tide::text::gpt2_pretokenize(s)) {
    if (piece.empty() || piece.data() != s.data() + covered) fail("pieces do not cover s", s);
    covered += piece.size();
    if (piece.size() <= 48 &&
        v.toy->merge_piece(piece) !=
            tide::test_util::reference_merge(v.toy_files.first, v.toy_files.second, piece))
      fail("the toy's merges differ from the reference loop", s);
  }
  if (covered != s.size()) fail("pieces do not cover s", s);
  check_round_trip(*v.toy, s);
  if (v.gpt2) check_round_trip(*v.gpt2, s);
  return 0;
}
