// A tokenized text for language-model training and its batches: TextCorpus reads a file
// (any bytes; UTF-8 in practice), tokenizes it once and splits the tokens 90/10 into training
// and validation; TextLoader samples (x, y) batches of windows from one split at random
// offsets of a seeded stream, prepared ahead on a background thread.
// Host memory: the batches are built in plain host memory. On a GPU, Tensor::to copies them
// through the GPU's pinned staging (core/allocator.h), so the transfer itself is from pinned
// memory; building them in pinned memory would only add that copy's twin.
// Not done here: streaming files larger than memory, document boundaries, epochs (every
// batch is an independent draw).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/options.h"
#include "text/prefetcher.h"
#include "text/tokenizer.h"
#include "train/data.h"

namespace tide::text {

enum class Split { train, val };
// "training" or "validation".
const char* split_name(Split split);

class TextCorpus {
 public:
  // The first floor(0.9 n) of the n tokens train, the rest validate.
  static constexpr int64_t kTrainPercent = 90;

  // Takes tokens already made. `name` (the file) starts messages. Throws "[text]" when
  // there are no tokens, vocab_size < 1, or a token is outside [0, vocab_size).
  TextCorpus(std::vector<int32_t> tokens, int64_t vocab_size, std::string name = "text");
  // Tokenizes `text` with `tokenizer`. Throws "[text] <name> is empty" for an empty text,
  // and what the tokenizer throws (a CharTokenizer's unknown byte).
  static TextCorpus from_text(std::string_view text, const Tokenizer& tokenizer,
                              std::string name = "text");
  // Reads the file at `path` (text/read_file.h) and tokenizes it. Throws "[text] <path>: ..."
  // for a missing, unreadable, non-regular or empty file, and as from_text.
  static TextCorpus from_file(const std::string& path, const Tokenizer& tokenizer);

  std::span<const int32_t> tokens() const { return tokens_; }
  // The tokens of one split: training [0, train_size), validation [train_size, size).
  std::span<const int32_t> split(Split s) const;
  int64_t size() const { return int64_t(tokens_.size()); }
  int64_t train_size() const { return train_size_; }
  int64_t vocab_size() const { return vocab_size_; }
  const std::string& name() const { return name_; }

 private:
  std::vector<int32_t> tokens_;
  int64_t vocab_size_;
  int64_t train_size_;
  std::string name_;
};

struct TextLoaderOptions {
  TIDE_ARG(int64_t, batch_size) = 8;   // B: windows per batch
  TIDE_ARG(int64_t, block_size) = 64;  // T: tokens per window (the model's context)
  TIDE_ARG(uint64_t, seed) = 0;
  TIDE_ARG(Split, split) = Split::train;
  // Where the batches go (host memory first, then Tensor::to; see the top of this file).
  TIDE_ARG(Device, device) = Device::cpu();
  // Batches prepared ahead on the background thread (>= 1).
  TIDE_ARG(int, prefetch) = 2;
};

// Batches of B windows of T tokens from one split: x = tokens[o, o+T) and y = tokens[o+1,
// o+T+1) for each window start o, as int64 tensors of shape (B, T) on options.device_.
// The starts of batch k are drawn uniformly from [0, split size - T) by a stream keyed by
// (seed, split, k) alone: the same seed gives the same batches on every machine and thread,
// and the background thread prepares them ahead without changing them.
class TextLoader {
 public:
  // Starts the background thread. Throws "[text]" for a null corpus, batch_size or
  // block_size <= 0, batch_size * block_size over 2^31, prefetch < 1, a device this
  // process cannot use, and a split with fewer than block_size + 1 tokens (naming the file,
  // the split and both sizes).
  TextLoader(std::shared_ptr<const TextCorpus> corpus, const TextLoaderOptions& options = {});
  // Stops the background thread (without waiting for batches nobody took).
  ~TextLoader() = default;
  // The background thread refers to this object: it stays where it was made.
  TextLoader(const TextLoader&) = delete;
  TextLoader& operator=(const TextLoader&) = delete;

  // The next batch, {x, y}. Waits only when the background thread has not prepared it yet;
  // rethrows what the thread threw. Queues the copy to a GPU without waiting for it.
  train::Batch next();
  // The window starts of batch k (what next() gives as its k-th batch, counting from 0).
  std::vector<int64_t> offsets(uint64_t k) const;
  // Batches next() has returned.
  uint64_t batches_taken() const { return taken_; }
  const TextLoaderOptions& options() const { return opt_; }
  const TextCorpus& corpus() const { return *corpus_; }

 private:
  struct HostBatch {
    std::vector<int64_t> x, y;
  };
  HostBatch make(uint64_t k) const;

  std::shared_ptr<const TextCorpus> corpus_;
  TextLoaderOptions opt_;
  std::span<const int32_t> tokens_;  // the split
  uint64_t key_ = 0;                 // (seed, split)
  uint64_t taken_ = 0;
  std::unique_ptr<Prefetcher<HostBatch>> prefetcher_;  // last: its thread reads the above
};

}  // namespace tide::text
