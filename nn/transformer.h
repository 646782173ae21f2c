// The pieces of a GPT-2 style transformer block: causal multi-head self-attention, the MLP
// (GELU, tanh form) and the pre-norm Block that adds both to the residual stream.
// Parameter names are GPT-2's (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj, ln_1, ln_2)
// and tide's Linear layout (in, out) is GPT-2's Conv1D layout, so a GPT-2 state dict maps
// one to one. Inputs are (B, T, C); forward_step takes one new position (B, 1, C) against a
// KVCache of the keys and values before it (generation). Not here: attention dropout,
// grouped key/value heads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nn/module.h"
#include "nn/norm.h"

namespace tide::nn {

// The sizes every piece of a block needs.
struct BlockOptions {
  BlockOptions(int64_t width, int64_t heads) : n_embd(width), n_head(heads) {}
  int64_t n_embd;
  int64_t n_head;
  TIDE_ARG(int64_t, n_layer) = 1;   // scales the residual projections' init (GPT-2)
  TIDE_ARG(double, dropout) = 0.0;  // after each residual projection, in training
  TIDE_ARG(bool, bias) = true;      // biases in the Linears and LayerNorms
  TIDE_ARG_AS(DType, dtype, param_dtype) = DType::float32;
};

// One layer's keys and values of the positions seen so far, for generation: k and v are
// (capacity, B, H, D), rows [0, len) filled.
struct KVCache {
  Tensor k, v;
  int64_t len = 0;
};

// Weights ~ N(0, 0.02^2) and zero biases (GPT-2's initialisation); the residual
// projections (c_proj) use std 0.02 / sqrt(2 * n_layer).
class CausalSelfAttention : public Module {
 public:
  // Throws "[CausalSelfAttention]" unless n_head divides n_embd (both >= 1).
  explicit CausalSelfAttention(const BlockOptions& opt, Generator& gen = default_generator());
  // x (B, T, C) -> (B, T, C): one GEMM for q, k and v, scaled_dot_product_attention with the
  // causal mask over each head, the output projection. Throws "[CausalSelfAttention]"
  // naming the shape unless x is (B, T, C). Queued; does not wait.
  Tensor forward(const Tensor& x) override;
  // x (B, 1, C), the next position: its k and v are written at row cache.len (the cache is
  // made on the first call, with `capacity` rows) and it attends to rows [0, len]; len
  // grows by one. Throws "[CausalSelfAttention]" naming the shape unless x is (B, 1, C), or
  // when the cache is full or was made for another batch. Queued; does not wait.
  Tensor forward_step(const Tensor& x, KVCache& cache, int64_t capacity);
  std::string name() const override { return "CausalSelfAttention"; }

 private:
  BlockOptions opt_;
  std::shared_ptr<Module> c_attn_, c_proj_, drop_;
};

// c_fc (C -> 4C), GELU (tanh form, GPT-2's), c_proj (4C -> C).
class MLP : public Module {
 public:
  explicit MLP(const BlockOptions& opt, Generator& gen = default_generator());
  // x (B, T, C) or (N, C) -> the same shape. Queued; does not wait.
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MLP"; }

 private:
  BlockOptions opt_;
  std::shared_ptr<Module> c_fc_, c_proj_, drop_;
};

// x + attn(ln_1(x)), then x + mlp(ln_2(x)).
class Block : public Module {
 public:
  explicit Block(const BlockOptions& opt, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  // forward for one new position (B, 1, C) with the attention's cache (see above).
  Tensor forward_step(const Tensor& x, KVCache& cache, int64_t capacity);
  std::string name() const override { return "Block"; }

 private:
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<MLP> mlp_;
};

}  // namespace tide::nn
