// GPT: a GPT-2 style decoder-only transformer (pre-norm blocks, learned positions, the
// output head tied to the token embedding, GPT-2's initialisation). Parameter names are
// GPT-2's ("transformer.wte.weight", "transformer.h.0.attn.c_attn.weight", ...), and
// Linear weights are (in, out) as in GPT-2's checkpoints, so save/load (nn/serialize.h)
// exchange weights with PyTorch by name. The tied head is not a separate parameter.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/embedding.h"
#include "nn/module.h"
#include "nn/norm.h"
#include "nn/transformer.h"
#include "ops/checkpoint_options.h"

namespace tide::nn {

struct GPTConfig {
  int64_t vocab_size = 65;
  int64_t block_size = 64;  // the longest context
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  bool bias = true;
  DType dtype = DType::float32;
  // Activation recomputation: each block runs under nn::checkpoint (nn/checkpoint.h), so
  // backward recomputes it instead of keeping its activations; the same results and
  // gradients, bit for bit, for less memory and one more forward of the blocks.
  bool recompute = false;
  // With recompute, whether the last block is recomputed too. Its activations are used as
  // soon as the forward ends, so keeping them (false) saves a quarter of a 4-layer model's
  // recompute and adds one block's activations only to the peak at the head and loss.
  bool recompute_last_block = true;
  // With recompute, what each block keeps of its first run instead of recomputing it
  // (ops/checkpoint_options.h; default nothing, so a block's forward runs twice).
  CheckpointOptions recompute_keep;
  // Selective recomputation: recompute every block but the last, each keeping its MLP's
  // down-projection output (the GEMM with K = 4 * n_embd, a third of a block's GEMM FLOPs
  // for one n_embd-wide row per token) and its attention's output. Less memory saved than
  // full recomputation, for a much cheaper recompute. Returns *this.
  GPTConfig& selective_recompute();

  // nanoGPT's small character model (4 layers, 4 heads, width 128, context 64) for a
  // vocabulary of `vocab` characters.
  static GPTConfig char_model(int64_t vocab);
  // GPT-2 124M: 12 layers, 12 heads, width 768, context 1024, GPT-2's 50257 tokens.
  static GPTConfig gpt2_124m();
  // Throws "[GPT]" naming the field for a size < 1, n_head not dividing n_embd, dropout
  // outside [0, 1) or a non-floating dtype.
  void check() const;
};

// Every layer's keys and values of the positions fed so far (GPT::forward_step).
struct GPTCache {
  std::vector<KVCache> layers;
  int64_t len = 0;
};

class GPT : public Module {
 public:
  // Throws as GPTConfig::check.
  explicit GPT(const GPTConfig& config, Generator& gen = default_generator());

  // ids (B, T) int32/int64 token ids, T <= block_size -> logits (B, T, vocab). Throws
  // "[GPT]" naming the shape for other ranks, dtypes or a T past block_size. An id outside
  // the vocabulary fails when the kernel runs (take_rows). Queued; does not wait.
  Tensor forward(const Tensor& ids) override;
  // The mean cross-entropy of the next-token predictions: targets (B, T) like ids. A 0-d
  // tensor. Throws "[GPT]" when targets' shape differs from ids'. Queued; does not wait.
  Tensor loss(const Tensor& ids, const Tensor& targets);
  std::string name() const override { return "GPT"; }
  // The next position: ids (B, 1), the tokens at position cache.len, against the keys and
  // values the cache holds of the positions before -> logits (B, vocab), what forward gives
  // for the last position of the whole sequence (up to rounding). The cache grows by one
  // position. Throws "[GPT]" for ids not (B, 1) int32/int64 or a cache already holding
  // block_size positions. Queued; does not wait.
  Tensor forward_step(const Tensor& ids, GPTCache& cache);

  const GPTConfig& config() const { return config_; }
  // Parameters in the model (the tied head counted once).
  int64_t num_parameters() const;

 private:
  Tensor hidden(const Tensor& ids);  // (B*T, C) after ln_f
  Tensor head(const Tensor& x);      // (N, C) -> (N, vocab) logits

  GPTConfig config_;
  std::shared_ptr<Module> transformer_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<LayerNorm> ln_f_;
};

// Sampling settings for generate().
struct SampleOptions {
  TIDE_ARG(int64_t, tokens) = 200;      // new tokens to produce
  TIDE_ARG(double, temperature) = 1.0;  // > 0; logits are divided by it
  TIDE_ARG(int64_t, top_k) = 0;         // keep the k most likely tokens (0: all)
};

// Continues `prompt` (token ids, at least one) by sampling one token at a time from the
// softmax of the last position's logits, with uniform draws from `gen` (Philox: the same
// seed gives the same text on every device). Each token runs one position against a KV
// cache (forward_step); when the context reaches the model's block_size, the cache restarts
// from the last block_size / 2 tokens. Runs the model in eval mode and restores its mode.
// Waits for each token.
// Throws "[generate]" for an empty prompt, temperature <= 0 or top_k < 0.
std::vector<int32_t> generate(GPT& model, std::vector<int32_t> prompt, const SampleOptions& options,
                              Generator& gen = default_generator());

}  // namespace tide::nn
