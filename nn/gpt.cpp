// GPT (nn/gpt.h): the model's wiring, its loss and token-by-token sampling on the host.
#include "nn/gpt.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "nn/checkpoint.h"
#include "nn/loss.h"
#include "ops/ops.h"

namespace tide::nn {

GPTConfig GPTConfig::char_model(int64_t vocab) {
  GPTConfig c;
  c.vocab_size = vocab;
  return c;
}

GPTConfig GPTConfig::gpt2_124m() {
  GPTConfig c;
  c.vocab_size = 50257;
  c.block_size = 1024;
  c.n_layer = 12;
  c.n_head = 12;
  c.n_embd = 768;
  return c;
}

GPTConfig& GPTConfig::selective_recompute() {
  recompute = true;
  recompute_last_block = false;
  recompute_keep = CheckpointOptions().gemms_min_k(4 * n_embd).attention();
  return *this;
}

void GPTConfig::check() const {
  auto positive = [](int64_t v, const char* field) {
    TIDE_CHECK(v >= 1, "GPT", field, " must be >= 1, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(block_size, "block_size");
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_embd, "n_embd");
  TIDE_CHECK(n_embd % n_head == 0, "GPT", "n_head ", n_head, " must divide n_embd ", n_embd);
  TIDE_CHECK(dropout >= 0 && dropout < 1, "GPT", "dropout must be in [0, 1), got ", dropout);
  TIDE_CHECK(is_floating(dtype), "GPT", "needs a floating dtype, got ", dtype);
}

GPT::GPT(const GPTConfig& config, Generator& gen) : config_(config) {
  config.check();
  transformer_ = register_module("transformer", std::make_shared<Module>());
  auto emb = [&](int64_t n) {
    return std::make_shared<Embedding>(
        EmbeddingOptions(n, config.n_embd).init_std(0.02).dtype(config.dtype), gen);
  };
  wte_ = transformer_->register_module("wte", emb(config.vocab_size));
  wpe_ = transformer_->register_module("wpe", emb(config.block_size));
  auto h = transformer_->register_module("h", std::make_shared<Sequential>());
  const BlockOptions bo = BlockOptions(config.n_embd, config.n_head)
                              .n_layer(config.n_layer)
                              .dropout(config.dropout)
                              .bias(config.bias)
                              .dtype(config.dtype);
  for (int64_t i = 0; i < config.n_layer; ++i) {
    blocks_.push_back(std::make_shared<Block>(bo, gen));
    h->push_back(blocks_.back());
  }
  ln_f_ = transformer_->register_module(
      "ln_f", std::make_shared<LayerNorm>(
                  LayerNormOptions(config.n_embd).bias(config.bias).dtype(config.dtype)));
}

Tensor GPT::hidden(const Tensor& ids) {
  check_token_ids(
      ids, [](const Tensor& t) { return t.ndim() == 2; }, "GPT",
      "expected token ids (B, T) of int32/int64");
  const int64_t t = ids.size(1);
  TIDE_CHECK(t >= 1 && t <= config_.block_size, "GPT", "a context of ", t,
             " tokens; the model takes 1 to ", config_.block_size, " (block_size)");
  // Token embeddings (B, T, C) plus the first T position embeddings (T, C), broadcast.
  Tensor x = add(wte_->forward(ids), wpe_->weight().slice(0, t));
  for (auto& b : blocks_) {
    const bool recompute =
        config_.recompute && (config_.recompute_last_block || b != blocks_.back());
    x = recompute ? checkpoint(b, x, config_.recompute_keep) : b->forward(x);
  }
  return ln_f_->forward(x).reshape({-1, config_.n_embd});
}

Tensor GPT::head(const Tensor& x) {
  // Tied to the token embedding: logits = x @ wte^T (a BLAS flag, no copy).
  return matmul(x, wte_->weight(), MatmulOptions{.trans_b = true});
}

Tensor GPT::forward(const Tensor& ids) {
  return head(hidden(ids)).reshape({ids.size(0), ids.size(1), config_.vocab_size});
}

Tensor GPT::loss(const Tensor& ids, const Tensor& targets) {
  TIDE_CHECK(targets.defined() && ids.defined() && targets.shape() == ids.shape(), "GPT",
             "targets ", targets.defined() ? targets.shape().str() : std::string("(undefined)"),
             " must have the ids' shape ",
             ids.defined() ? ids.shape().str() : std::string("(undefined)"));
  return cross_entropy(head(hidden(ids)), targets.reshape({-1}));
}

Tensor GPT::forward_step(const Tensor& ids, GPTCache& cache) {
  check_token_ids(
      ids, [](const Tensor& t) { return t.ndim() == 2 && t.size(1) == 1; }, "GPT",
      "forward_step expects token ids (B, 1) of int32/int64");
  TIDE_CHECK(cache.len < config_.block_size, "GPT", "the cache holds ", cache.len,
             " positions, the model's context (block_size)");
  if (cache.layers.size() != blocks_.size()) cache.layers.assign(blocks_.size(), KVCache{});
  Tensor x = add(wte_->forward(ids), wpe_->weight().slice(cache.len, cache.len + 1));
  for (size_t i = 0; i < blocks_.size(); ++i)
    x = blocks_[i]->forward_step(x, cache.layers[i], config_.block_size);
  ++cache.len;
  return head(ln_f_->forward(x).reshape({-1, config_.n_embd}));
}

int64_t GPT::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

namespace {

// One token from the logits of the last position: softmax(logits / temperature) over the
// top_k largest (all when 0), sampled by inverting the CDF at u in [0, 1).
int32_t sample_token(std::vector<float> logits, double temperature, int64_t top_k, double u) {
  const size_t v = logits.size();
  std::vector<int32_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  // Descending by logit, ties by id, so the choice is the same on every machine.
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  const size_t k = top_k > 0 ? std::min(v, size_t(top_k)) : v;
  const double m = logits[size_t(order[0])];
  std::vector<double> p(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i)
    total += p[i] = std::exp((double(logits[size_t(order[i])]) - m) / temperature);
  double acc = 0;
  for (size_t i = 0; i < k; ++i) {
    acc += p[i] / total;
    if (u < acc) return order[i];
  }
  return order[k - 1];
}

}  // namespace

std::vector<int32_t> generate(GPT& model, std::vector<int32_t> prompt, const SampleOptions& o,
                              Generator& gen) {
  TIDE_CHECK(!prompt.empty(), "generate", "needs a prompt of at least one token");
  TIDE_CHECK(o.temperature_ > 0 && std::isfinite(o.temperature_), "generate",
             "temperature must be > 0, got ", o.temperature_);
  TIDE_CHECK(o.top_k_ >= 0, "generate", "top_k must be >= 0, got ", o.top_k_);
  TIDE_CHECK(o.tokens_ >= 0, "generate", "tokens must be >= 0, got ", o.tokens_);
  const bool was_training = model.is_training();
  model.eval();
  NoGrad no_grad;
  const Device device = model.parameters().front().device();
  const int64_t block = model.config().block_size;
  std::vector<int32_t> out = std::move(prompt);
  GPTCache cache;
  // Feeds tokens [from, out.size()) one position each; returns the last one's logits.
  auto feed = [&](size_t from) {
    Tensor logits;
    for (size_t p = from; p < out.size(); ++p)
      logits = model.forward_step(from_vector<int32_t>({out[p]}, {1, 1}, device), cache);
    return logits;
  };
  auto restart = [&] {  // the last block / 2 tokens (at least one) in a fresh cache
    cache = GPTCache{};
    return feed(out.size() - size_t(std::max<int64_t>(1, block / 2)));
  };
  Tensor last = int64_t(out.size()) > block ? restart() : feed(0);
  for (int64_t i = 0; i < o.tokens_; ++i) {
    const double u = rand({1}, DType::float64, gen, device).item<double>();
    if (last.dtype() != DType::float32) last = cast(last, DType::float32);
    out.push_back(sample_token(last.to_vector<float>(), o.temperature_, o.top_k_, u));
    if (i + 1 == o.tokens_) break;
    last = cache.len == block ? restart() : feed(out.size() - 1);
  }
  model.train(was_training);
  return out;
}

}  // namespace tide::nn
