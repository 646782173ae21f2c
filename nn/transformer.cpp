// CausalSelfAttention, MLP and Block (nn/transformer.h). The attention is one fused op that
// reads the heads out of the QKV projection's rows and writes the output projection's (no
// head split or merge copies); the KV-cached step still moves its heads with swap_axes.
#include "nn/transformer.h"

#include <cmath>

#include "core/error.h"
#include "ops/ops.h"

namespace tide::nn {

namespace {

std::shared_ptr<Linear> make_linear(int64_t in, int64_t out, double std, const BlockOptions& o,
                                    Generator& gen) {
  return std::make_shared<Linear>(
      LinearOptions(in, out).bias(o.bias_).init(Init::normal).init_std(std).dtype(o.param_dtype),
      gen);
}

double residual_std(const BlockOptions& o) { return 0.02 / std::sqrt(2.0 * double(o.n_layer_)); }

Tensor linear_rows(Module& m, const Tensor& x) {
  // Linear takes (N, in): fold the leading dims and restore them.
  const int64_t in = x.size(x.ndim() - 1);
  Tensor y = m.forward(x.reshape({-1, in}));
  std::vector<int64_t> shape(x.shape().begin(), x.shape().end());
  shape.back() = y.size(1);
  return y.reshape(shape);
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const BlockOptions& opt, Generator& gen) : opt_(opt) {
  TIDE_CHECK(opt.n_embd >= 1 && opt.n_head >= 1 && opt.n_embd % opt.n_head == 0,
             "CausalSelfAttention", "n_head must divide n_embd (both >= 1), got n_embd ",
             opt.n_embd, " and n_head ", opt.n_head);
  TIDE_CHECK(opt.n_layer_ >= 1, "CausalSelfAttention", "n_layer must be >= 1, got ", opt.n_layer_);
  c_attn_ = register_module("c_attn", make_linear(opt.n_embd, 3 * opt.n_embd, 0.02, opt, gen));
  c_proj_ =
      register_module("c_proj", make_linear(opt.n_embd, opt.n_embd, residual_std(opt), opt, gen));
  drop_ = register_module("resid_dropout", std::make_shared<Dropout>(opt.dropout_, gen));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  TIDE_CHECK(x.ndim() == 3 && x.size(2) == opt_.n_embd, "CausalSelfAttention",
             "expected input (B, T, ", opt_.n_embd, "), got ", x.shape());
  const int64_t b = x.size(0), t = x.size(1), c = opt_.n_embd, h = opt_.n_head, d = c / h;
  // (B*T, 3C) viewed as (B, T, 3, H, D): the attention reads the heads out of those rows
  // and writes (B, T, H, D) = (B*T, C), and its gradient is one (B, T, 3, H, D): no head
  // split or merge copies either way.
  Tensor qkv = c_attn_->forward(x.reshape({b * t, c})).reshape({b, t, 3, h, d});
  Tensor y = scaled_dot_product_attention_qkv(qkv, /*causal=*/true).reshape({b * t, c});
  y = drop_->forward(c_proj_->forward(y));
  return y.reshape({b, t, c});
}

Tensor CausalSelfAttention::forward_step(const Tensor& x, KVCache& cache, int64_t capacity) {
  TIDE_CHECK(x.ndim() == 3 && x.size(1) == 1 && x.size(2) == opt_.n_embd, "CausalSelfAttention",
             "forward_step expects one position (B, 1, ", opt_.n_embd, "), got ", x.shape());
  const int64_t b = x.size(0), c = opt_.n_embd, h = opt_.n_head, d = c / h;
  if (!cache.k.defined()) {
    cache.k = zeros({capacity, b, h, d}, x.dtype(), x.device());
    cache.v = zeros({capacity, b, h, d}, x.dtype(), x.device());
    cache.len = 0;
  }
  TIDE_CHECK(cache.k.size(1) == b, "CausalSelfAttention", "the cache holds a batch of ",
             cache.k.size(1), ", the input ", b);
  TIDE_CHECK(cache.len < cache.k.size(0), "CausalSelfAttention", "the cache is full (",
             cache.k.size(0), " positions)");
  // (B, 3C) as (B, 3, H, D) -> (3, B, H, D): q, k and v are rows of it.
  Tensor qkv = swap_axes(c_attn_->forward(x.reshape({b, c})).reshape({b, 3, h, d}), 0, 1);
  {
    NoGrad ng;
    cache.k.slice(cache.len, cache.len + 1).copy_(qkv.slice(1, 2));
    cache.v.slice(cache.len, cache.len + 1).copy_(qkv.slice(2, 3));
  }
  ++cache.len;
  // The rows seen, (len, B, H, D) -> (B, H, len, D); the query (1, B, H, D) is (B, H, 1, D).
  auto seen = [&](const Tensor& t) {
    return swap_axes(swap_axes(t.slice(0, cache.len), 0, 1), 1, 2);
  };
  Tensor y = scaled_dot_product_attention(qkv.slice(0, 1).reshape({b, h, 1, d}), seen(cache.k),
                                          seen(cache.v), /*causal=*/false);
  // (B, H, 1, D) is (B, C) in memory: the heads in order.
  return drop_->forward(c_proj_->forward(y.reshape({b, c}))).reshape({b, 1, c});
}

MLP::MLP(const BlockOptions& opt, Generator& gen) : opt_(opt) {
  TIDE_CHECK(opt.n_embd >= 1 && opt.n_layer_ >= 1, "MLP", "needs n_embd and n_layer >= 1, got ",
             opt.n_embd, " and ", opt.n_layer_);
  c_fc_ = register_module("c_fc", make_linear(opt.n_embd, 4 * opt.n_embd, 0.02, opt, gen));
  c_proj_ = register_module("c_proj",
                            make_linear(4 * opt.n_embd, opt.n_embd, residual_std(opt), opt, gen));
  drop_ = register_module("dropout", std::make_shared<Dropout>(opt.dropout_, gen));
}

Tensor MLP::forward(const Tensor& x) {
  TIDE_CHECK(x.ndim() >= 2 && x.size(x.ndim() - 1) == opt_.n_embd, "MLP", "expected input (..., ",
             opt_.n_embd, "), got ", x.shape());
  // GELU as its own op, not in c_fc's kernel (linear's Activation::gelu_tanh): on the CPU
  // that measured no faster (bench/RESULTS.md, "GELU after the bias in the GEMM's row
  // parts"), and a separate GELU is what a traced step's memory budget recomputes.
  Tensor hidden = gelu(linear_rows(*c_fc_, x), GeluApprox::tanh);
  return drop_->forward(linear_rows(*c_proj_, hidden));
}

Block::Block(const BlockOptions& opt, Generator& gen) {
  auto norm = [&] {
    return std::make_shared<LayerNorm>(
        LayerNormOptions(opt.n_embd).bias(opt.bias_).dtype(opt.param_dtype));
  };
  ln_1_ = register_module("ln_1", norm());
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(opt, gen));
  ln_2_ = register_module("ln_2", norm());
  mlp_ = register_module("mlp", std::make_shared<MLP>(opt, gen));
}

Tensor Block::forward_step(const Tensor& x, KVCache& cache, int64_t capacity) {
  Tensor r = add(x, attn_->forward_step(ln_1_->forward(x), cache, capacity));
  return add(r, mlp_->forward(ln_2_->forward(r)));
}

Tensor Block::forward(const Tensor& x) {
  Tensor r = add(x, attn_->forward(ln_1_->forward(x)));
  return add(r, mlp_->forward(ln_2_->forward(r)));
}

}  // namespace tide::nn
