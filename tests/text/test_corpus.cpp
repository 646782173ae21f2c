// text/corpus.h: the 90/10 split, the loader's batches (shapes, dtypes, windows at the
// offsets it reports, y one token after x, determinism per seed), batches on a (fake) GPU,
// early stops, and every error; the Shakespeare corpus when fetched.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "error_of.h"
#include "fake_gpu.h"
#include "text/bpe.h"
#include "text/char_tokenizer.h"
#include "text/corpus.h"
#include "text_data.h"
#include "tide.h"

using namespace tide;
using namespace tide::text;
using tide::test_util::error_of;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<const TextCorpus> counting_corpus(int32_t n, int64_t vocab = 1 << 20) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[size_t(i)] = i;
  return std::make_shared<const TextCorpus>(std::move(t), vocab, "count");
}

std::string temp_file(const std::string& name, const std::string& bytes) {
  const std::string path =
      (fs::temp_directory_path() / ("tide_corpus_" + std::to_string(::getpid()) + "_" + name))
          .string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace

TEST(TextCorpus, SplitsNinetyTen) {
  auto c = counting_corpus(1005);
  EXPECT_EQ(c->size(), 1005);
  EXPECT_EQ(c->train_size(), 904);  // floor(0.9 * 1005)
  EXPECT_EQ(c->split(Split::train).size(), 904u);
  EXPECT_EQ(c->split(Split::val).size(), 101u);
  EXPECT_EQ(c->split(Split::val).front(), 904);
  EXPECT_EQ(c->split(Split::train).data(), c->tokens().data());
  EXPECT_STREQ(split_name(Split::train), "training");
  EXPECT_STREQ(split_name(Split::val), "validation");
}

TEST(TextCorpus, FromFileAndText) {
  const std::string text = "to be or not to be\n";
  const std::string path = temp_file("small.txt", text);
  CharTokenizer tok = CharTokenizer::from_corpus(text);
  TextCorpus c = TextCorpus::from_file(path, tok);
  EXPECT_EQ(c.name(), path);
  EXPECT_EQ(c.vocab_size(), tok.vocab_size());
  EXPECT_EQ(std::vector<int32_t>(c.tokens().begin(), c.tokens().end()), tok.encode(text));
  EXPECT_EQ(TextCorpus::from_text(text, tok, "t").size(), int64_t(text.size()));
  fs::remove(path);
}

TEST(TextCorpus, Errors) {
  CharTokenizer tok = CharTokenizer::from_corpus("abc");
  EXPECT_EQ(error_of([&] { TextCorpus::from_file("/nonexistent/input.txt", tok); }),
            "[text] /nonexistent/input.txt: no such file");
  const std::string dir = fs::temp_directory_path().string();
  EXPECT_EQ(error_of([&] { TextCorpus::from_file(dir, tok); }),
            "[text] " + dir + ": is a directory, not a file");
  EXPECT_EQ(error_of([&] { TextCorpus::from_file("/dev/null", tok); }),
            "[text] /dev/null: is not a regular file");
  const std::string empty = temp_file("empty.txt", "");
  EXPECT_EQ(error_of([&] { TextCorpus::from_file(empty, tok); }),
            "[text] " + empty + ": the file is empty");
  fs::remove(empty);
  const std::string other = temp_file("other.txt", "abd");
  EXPECT_EQ(error_of([&] { TextCorpus::from_file(other, tok); }),
            "[char_tokenizer] byte 0x64 ('d') at offset 2 is not in the vocabulary of 3 bytes");
  fs::remove(other);
  EXPECT_EQ(error_of([&] { TextCorpus::from_text("", tok, "t"); }), "[text] t is empty");
  EXPECT_EQ(error_of([] { TextCorpus({}, 5, "t"); }), "[text] t: no tokens");
  EXPECT_EQ(error_of([] { TextCorpus({1}, 0, "t"); }),
            "[text] t: the vocabulary size must be positive, got 0");
  EXPECT_EQ(error_of([] {
              TextCorpus({1, 5, 2}, 5, "t");
            }),
            "[text] t: token 5 at position 1 is outside the vocabulary [0, 5)");
}

TEST(TextLoader, BatchesAreWindowsAtTheReportedOffsets) {
  auto c = counting_corpus(1000);  // token i at position i: a window shows its offset
  TextLoader loader(c, TextLoaderOptions().batch_size(4).block_size(8).seed(42));
  for (uint64_t k = 0; k < 20; ++k) {
    const std::vector<int64_t> offsets = loader.offsets(k);
    train::Batch b = loader.next();
    ASSERT_EQ(b.x.shape(), (Shape{4, 8}));
    ASSERT_EQ(b.y.shape(), (Shape{4, 8}));
    ASSERT_EQ(b.x.dtype(), DType::int64);
    ASSERT_EQ(b.y.dtype(), DType::int64);
    ASSERT_TRUE(b.x.device().is_cpu());
    const std::vector<int64_t> x = b.x.to_vector<int64_t>(), y = b.y.to_vector<int64_t>();
    for (int64_t r = 0; r < 4; ++r) {
      const int64_t o = offsets[size_t(r)];
      ASSERT_GE(o, 0);
      ASSERT_LE(o + 8, 900 - 1);  // the window and its target stay in the training split
      for (int64_t t = 0; t < 8; ++t) {
        ASSERT_EQ(x[size_t(r * 8 + t)], o + t);
        ASSERT_EQ(y[size_t(r * 8 + t)], o + t + 1);
      }
    }
  }
  EXPECT_EQ(loader.batches_taken(), 20u);
}

TEST(TextLoader, ValidationBatchesComeFromTheValidationSplit) {
  auto c = counting_corpus(1000);
  TextLoader loader(c, TextLoaderOptions().batch_size(16).block_size(10).split(Split::val));
  for (int k = 0; k < 10; ++k) {
    const std::vector<int64_t> x = loader.next().x.to_vector<int64_t>();
    for (int64_t v : x) ASSERT_TRUE(v >= 900 && v < 1000) << v;
  }
}

TEST(TextLoader, DeterministicPerSeed) {
  auto c = counting_corpus(5000);
  auto run = [&](uint64_t seed, int prefetch) {
    TextLoader loader(
        c, TextLoaderOptions().batch_size(3).block_size(5).seed(seed).prefetch(prefetch));
    std::vector<int64_t> all;
    for (int k = 0; k < 10; ++k) {
      std::vector<int64_t> x = loader.next().x.to_vector<int64_t>();
      all.insert(all.end(), x.begin(), x.end());
    }
    return all;
  };
  const std::vector<int64_t> a = run(7, 1);
  EXPECT_EQ(run(7, 4), a);  // prefetching does not change the batches
  EXPECT_NE(run(8, 1), a);
  // The starts cover the range: 30 draws from 4495 values are not all in one half.
  std::set<int64_t> starts;
  for (size_t i = 0; i < a.size(); i += 5) starts.insert(a[i]);
  EXPECT_GT(starts.size(), 25u);
  EXPECT_LT(*starts.begin(), 4495 / 2);
  EXPECT_GT(*starts.rbegin(), 4495 / 2);
  // The train and validation streams of one seed differ.
  TextLoader t(c, TextLoaderOptions().seed(1).block_size(4));
  TextLoader v(c, TextLoaderOptions().seed(1).block_size(4).split(Split::val));
  EXPECT_NE(t.offsets(0), v.offsets(0));
}

TEST(TextLoader, EveryStartCanBeDrawn) {
  auto c = counting_corpus(14);  // train: 12 tokens (floor(12.6))
  TextLoader loader(c, TextLoaderOptions().batch_size(64).block_size(11).prefetch(1));
  std::set<int64_t> starts;
  for (int64_t o : loader.offsets(0)) starts.insert(o);
  EXPECT_EQ(starts, (std::set<int64_t>{0}));  // T = 11: only start 0
  TextLoader two(c, TextLoaderOptions().batch_size(64).block_size(10).prefetch(1));
  starts.clear();
  for (int64_t o : two.offsets(0)) starts.insert(o);  // T = 10: 0 and 1, each 1/2 a draw
  EXPECT_EQ(starts, (std::set<int64_t>{0, 1}));
}

TEST(TextLoader, StopsEarly) {
  // Each destructor joins its thread without draining the queue (a deadlock would hang
  // here until ctest's timeout).
  auto c = counting_corpus(100000);
  for (int taken = 0; taken < 3; ++taken) {
    TextLoader loader(c, TextLoaderOptions().batch_size(64).block_size(256).prefetch(3));
    for (int k = 0; k < taken; ++k) EXPECT_EQ(loader.next().x.shape(), (Shape{64, 256}));
    EXPECT_EQ(loader.batches_taken(), uint64_t(taken));
  }
}

TEST(TextLoader, BatchesOnAGpu) {
  test_util::fake_gpu(8);
  auto c = counting_corpus(1000);
  TextLoader loader(c, TextLoaderOptions().batch_size(2).block_size(6).device(Device::cuda(8)));
  const std::vector<int64_t> offsets = loader.offsets(0);
  train::Batch b = loader.next();
  EXPECT_EQ(b.x.device(), Device::cuda(8));
  EXPECT_EQ(b.y.device(), Device::cuda(8));
  const std::vector<int64_t> x = b.x.to(Device::cpu()).to_vector<int64_t>();
  const std::vector<int64_t> y = b.y.to(Device::cpu()).to_vector<int64_t>();
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t t = 0; t < 6; ++t) {
      EXPECT_EQ(x[size_t(r * 6 + t)], offsets[size_t(r)] + t);
      EXPECT_EQ(y[size_t(r * 6 + t)], offsets[size_t(r)] + t + 1);
    }
}

TEST(TextLoader, Errors) {
  auto c = counting_corpus(100);  // train 90, validation 10 tokens
  auto err = [&](const TextLoaderOptions& o) { return error_of([&] { TextLoader(c, o); }); };
  EXPECT_EQ(error_of([] { TextLoader(nullptr); }), "[text] the loader needs a corpus, got none");
  EXPECT_EQ(err(TextLoaderOptions().batch_size(0)), "[text] batch_size must be positive, got 0");
  EXPECT_EQ(err(TextLoaderOptions().block_size(-3)), "[text] block_size must be positive, got -3");
  EXPECT_EQ(err(TextLoaderOptions().batch_size(int64_t(1) << 30).block_size(4)),
            "[text] batch_size * block_size = 1073741824 * 4 is over 2^31 tokens per batch");
  EXPECT_EQ(err(TextLoaderOptions().block_size(4).prefetch(0)),
            "[text] prefetch must be at least 1, got 0");
  EXPECT_EQ(err(TextLoaderOptions().block_size(10).split(Split::val)),
            "[text] count: the validation split has 10 tokens, fewer than block_size + 1 = 11 "
            "(the text has 100 tokens, of which the first 90% train)");
  EXPECT_EQ(err(TextLoaderOptions().block_size(90)),
            "[text] count: the training split has 90 tokens, fewer than block_size + 1 = 91 "
            "(the text has 100 tokens, of which the first 90% train)");
  EXPECT_NE(err(TextLoaderOptions().block_size(4).device(Device::cuda(15)))
                .find("[text] cannot put batches on cuda:15"),
            std::string::npos);
  // The largest block that fits: T = 9 in the validation split of 10.
  TextLoader fits(c, TextLoaderOptions().block_size(9).split(Split::val));
  EXPECT_EQ(fits.next().x.to_vector<int64_t>().front(), 90);
}

TEST(TextLoader, ShakespeareWithBothTokenizers) {
  TIDE_REQUIRE_TEXT_DATA(path, "shakespeare.txt");
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  CharTokenizer chars = CharTokenizer::from_corpus(text);
  auto corpus = std::make_shared<const TextCorpus>(TextCorpus::from_file(path, chars));
  EXPECT_EQ(corpus->size(), int64_t(text.size()));
  TextLoader loader(corpus, TextLoaderOptions().batch_size(8).block_size(128).seed(3));
  train::Batch b = loader.next();
  const std::vector<int64_t> x = b.x.to_vector<int64_t>();
  const std::vector<int32_t> row(x.begin(), x.begin() + 128);
  EXPECT_EQ(chars.decode(row), text.substr(size_t(loader.offsets(0)[0]), 128));

  TIDE_REQUIRE_TEXT_DATA(encoder, "gpt2/encoder.json");
  BpeTokenizer bpe = BpeTokenizer::from_dir(test_util::text_data_dir() + "/gpt2");
  // The first 200 KB: enough for a GPT-2 batch, quick under the sanitizers.
  TextCorpus small = TextCorpus::from_text(text.substr(0, 200'000), bpe, "head");
  EXPECT_EQ(small.vocab_size(), 50257);
  TextLoader gpt(std::make_shared<const TextCorpus>(std::move(small)),
                 TextLoaderOptions().batch_size(4).block_size(64).split(Split::val));
  const std::vector<int64_t> ids = gpt.next().x.to_vector<int64_t>();
  for (int64_t id : ids) EXPECT_TRUE(id >= 0 && id < 50257);
}
