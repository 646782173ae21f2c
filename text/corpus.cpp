// TextCorpus and TextLoader (see corpus.h).
#include "text/corpus.h"

#include <algorithm>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/philox.h"
#include "ops/creation.h"
#include "text/read_file.h"

namespace tide::text {

namespace {
constexpr const char* kOp = "text";
}  // namespace

const char* split_name(Split split) { return split == Split::train ? "training" : "validation"; }

TextCorpus::TextCorpus(std::vector<int32_t> tokens, int64_t vocab_size, std::string name)
    : tokens_(std::move(tokens)), vocab_size_(vocab_size), name_(std::move(name)) {
  TIDE_CHECK(!tokens_.empty(), kOp, name_, ": no tokens");
  TIDE_CHECK(vocab_size_ >= 1, kOp, name_, ": the vocabulary size must be positive, got ",
             vocab_size_);
  for (size_t i = 0; i < tokens_.size(); ++i)
    TIDE_CHECK(tokens_[i] >= 0 && tokens_[i] < vocab_size_, kOp, name_, ": token ", tokens_[i],
               " at position ", i, " is outside the vocabulary [0, ", vocab_size_, ")");
  train_size_ = size() * kTrainPercent / 100;
}

TextCorpus TextCorpus::from_text(std::string_view text, const Tokenizer& tokenizer,
                                 std::string name) {
  TIDE_CHECK(!text.empty(), kOp, name, " is empty");
  return TextCorpus(tokenizer.encode(text), tokenizer.vocab_size(), std::move(name));
}

TextCorpus TextCorpus::from_file(const std::string& path, const Tokenizer& tokenizer) {
  const std::string text = read_file(path, kOp);
  TIDE_CHECK(!text.empty(), kOp, path, ": the file is empty");
  return from_text(text, tokenizer, path);
}

std::span<const int32_t> TextCorpus::split(Split s) const {
  const std::span<const int32_t> all(tokens_);
  return s == Split::train ? all.first(size_t(train_size_)) : all.subspan(size_t(train_size_));
}

TextLoader::TextLoader(std::shared_ptr<const TextCorpus> corpus, const TextLoaderOptions& options)
    : corpus_(std::move(corpus)), opt_(options) {
  TIDE_CHECK(corpus_ != nullptr, kOp, "the loader needs a corpus, got none");
  const int64_t B = opt_.batch_size_, T = opt_.block_size_;
  TIDE_CHECK(B > 0, kOp, "batch_size must be positive, got ", B);
  TIDE_CHECK(T > 0, kOp, "block_size must be positive, got ", T);
  TIDE_CHECK(B <= (int64_t(1) << 31) / T, kOp, "batch_size * block_size = ", B, " * ", T,
             " is over 2^31 tokens per batch");
  TIDE_CHECK(opt_.prefetch_ >= 1, kOp, "prefetch must be at least 1, got ", opt_.prefetch_);
  TIDE_CHECK(opt_.device_.is_cpu() || cuda::available(opt_.device_.index), kOp,
             "cannot put batches on ", opt_.device_.str(), ": ",
             cuda::device_count() == 0 ? "this process has no GPU" : "no such device");
  tokens_ = corpus_->split(opt_.split_);
  TIDE_CHECK(int64_t(tokens_.size()) >= T + 1, kOp, corpus_->name(), ": the ",
             split_name(opt_.split_), " split has ", tokens_.size(),
             " tokens, fewer than block_size + 1 = ", T + 1, " (the text has ", corpus_->size(),
             " tokens, of which the first ", TextCorpus::kTrainPercent, "% train)");
  key_ = philox::substream_key(opt_.seed_, uint64_t(opt_.split_));
  prefetcher_ = std::make_unique<Prefetcher<HostBatch>>([this](uint64_t k) { return make(k); },
                                                        opt_.prefetch_);
}

std::vector<int64_t> TextLoader::offsets(uint64_t k) const {
  // Uniform in [0, m) by Lemire's multiply-and-reject on splitmix64(base + i * gamma).
  const uint64_t m = uint64_t(tokens_.size()) - uint64_t(opt_.block_size_);
  const uint64_t base = philox::substream_key(key_, k);
  const uint64_t threshold = (0 - m) % m;  // 2^64 mod m
  std::vector<int64_t> out(size_t(opt_.batch_size_));
  uint64_t i = 0;
  for (auto& o : out) {
    for (;;) {
      const uint64_t draw = philox::splitmix64(base + i++ * 0x9E3779B97F4A7C15ull);
      const unsigned __int128 product = (unsigned __int128)draw * m;
      if (uint64_t(product) >= threshold) {
        o = int64_t(product >> 64);
        break;
      }
    }
  }
  return out;
}

TextLoader::HostBatch TextLoader::make(uint64_t k) const {
  const int64_t T = opt_.block_size_;
  HostBatch b;
  b.x.resize(size_t(opt_.batch_size_ * T));
  b.y.resize(b.x.size());
  const std::vector<int64_t> starts = offsets(k);
  for (size_t r = 0; r < starts.size(); ++r) {
    const int32_t* src = tokens_.data() + starts[r];
    std::copy(src, src + T, b.x.begin() + int64_t(r) * T);
    std::copy(src + 1, src + T + 1, b.y.begin() + int64_t(r) * T);
  }
  return b;
}

train::Batch TextLoader::next() {
  HostBatch b = prefetcher_->next();
  const Shape shape{opt_.batch_size_, opt_.block_size_};
  ++taken_;
  return {from_vector(b.x, shape, opt_.device_), from_vector(b.y, shape, opt_.device_)};
}

}  // namespace tide::text
