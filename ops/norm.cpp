// The normalisation family's front-ends (ops/norm.h): argument checks, shape rules and
// gradients over the kernel entries of ops/norm_kernels.h (CPU: ops/cpu/norm.cpp).
// Not here: the kernels, RMS norm, or a normalized_shape of more than one dimension.
#include "ops/norm.h"

#include "ops/autocast.h"
#include "ops/autograd.h"
#include "ops/kernel_entry.h"
#include "ops/norm_kernels.h"
#include "ops/op_util.h"

namespace tide {

using namespace detail;
using Grads = std::vector<Tensor>;

namespace {

// weight or bias: undefined, or (D,) of x's dtype and device.
void check_row_vector(OpId id, const Tensor& x, const Tensor& t, const char* what) {
  if (!t.defined()) return;
  const char* op = op_name(id);
  check_same(x, t, id);
  const int64_t d = x.size(x.ndim() - 1);
  TIDE_CHECK(t.ndim() == 1 && t.size(0) == d, op, what, " ", describe(t), " must be (D,) = (", d,
             ",) for x ", describe(x));
}

// The dtype of the forward's statistics: float32 for 16-bit x, else x's.
DType stats_dtype(const Tensor& x) { return is_half(x.dtype()) ? DType::float32 : x.dtype(); }

void check_rank(const char* op, const Tensor& x) {
  TIDE_CHECK(x.ndim() >= 1, op,
             "expected x of rank >= 1 (normalised over its last dimension), got ", describe(x));
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  Site site) {
  if (Tensor fx = x, fw = weight, fb = bias; autocast::raise({&fx, &fw, &fb}, site))
    return layer_norm(fx, fw, fb, eps, site);
  const OpId id = OpId::layer_norm;
  const char* op = op_name(id);
  check_defined(x, op);
  check_supported(x, id);
  check_floating(x, op);
  check_rank(op, x);
  check_row_vector(id, x, weight, "weight");
  check_row_vector(id, x, bias, "bias");
  TIDE_CHECK(eps > 0.0, op, "needs eps > 0, got ", eps);
  const int64_t d = x.size(x.ndim() - 1), rows = d > 0 ? x.numel() / d : 0;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), op);
  Tensor stats = Tensor::empty(Shape{2, rows}, stats_dtype(x), x.device(), op);
  if (y.numel() > 0)
    dispatch_floating_with_half(x.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::LayerNorm<T> a{x.ref<T>(), {}, {},    y.ref<T>(), stats.ref<compute_t<T>>(),
                              rows,       d,  false, false,      eps};
      auto fn = &kernels::cpu::layer_norm<T>;
      if (weight.defined()) a.has_weight = true, a.weight = weight.ref<T>();
      if (bias.defined()) a.has_bias = true, a.bias = bias.ref<T>();
      const std::initializer_list<Storage*> writes{y.storage(), stats.storage()};
      if (a.has_weight && a.has_bias)
        kernels::queue(id, x.device(), {x.storage(), weight.storage(), bias.storage()}, writes, fn,
                       a, kernels::NoExtra{}, site);
      else if (a.has_weight)
        kernels::queue(id, x.device(), {x.storage(), weight.storage()}, writes, fn, a,
                       kernels::NoExtra{}, site);
      else if (a.has_bias)
        kernels::queue(id, x.device(), {x.storage(), bias.storage()}, writes, fn, a,
                       kernels::NoExtra{}, site);
      else kernels::queue(id, x.device(), {x.storage()}, writes, fn, a, kernels::NoExtra{}, site);
    });
  const bool need_w = weight.defined() && autograd::needs_grad({&weight});
  const bool need_b = bias.defined() && autograd::needs_grad({&bias});
  autograd::record(id, y, {&x, &weight, &bias},
                   [x = x.detach(), w = weight.defined() ? weight.detach() : Tensor(), stats,
                    need_w, need_b](const Tensor& gy) {
                     LayerNormGrads g = layer_norm_grad(gy, x, w, stats, need_w || need_b);
                     return Grads{g.x, need_w ? g.weight : Tensor(), need_b ? g.bias : Tensor()};
                   });
  return y;
}

LayerNormGrads layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& weight,
                               const Tensor& stats, bool param_grads, Site site) {
  const OpId id = OpId::layer_norm_grad;
  const char* op = op_name(id);
  check_same(dy, x, id);
  check_floating(x, op);
  check_rank(op, x);
  TIDE_CHECK(dy.shape() == x.shape(), op, "dy ", describe(dy), " must have x's shape ",
             describe(x));
  check_row_vector(id, x, weight, "weight");
  const int64_t d = x.size(x.ndim() - 1), rows = d > 0 ? x.numel() / d : 0;
  TIDE_CHECK(stats.defined() && stats.dtype() == stats_dtype(x) && stats.device() == x.device(), op,
             "stats ", describe(stats), " must be ", stats_dtype(x), " on ", x.device().str(),
             " for x ", describe(x));
  TIDE_CHECK(stats.shape() == Shape({2, rows}), op, "stats ", describe(stats),
             " must be (2, R) = (2, ", rows, ") for x ", describe(x));
  LayerNormGrads g{Tensor::empty(x.shape(), x.dtype(), x.device(), op), Tensor(), Tensor()};
  const kernels::RowParts split = kernels::layer_norm_parts(rows);
  Tensor parts;
  if (param_grads) {
    g.weight = Tensor::empty(Shape{d}, x.dtype(), x.device(), op);
    g.bias = Tensor::empty(Shape{d}, x.dtype(), x.device(), op);
    parts = Tensor::empty(Shape{split.parts, 2, d}, DType::float64, x.device(), op);
  }
  if (d == 0) return g;
  dispatch_floating_with_half(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::LayerNormGrad<T> a{
        dy.ref<T>(), x.ref<T>(), {}, g.x.ref<T>(), {}, {}, stats.ref<compute_t<T>>(),
        {},          rows,       d,  split};
    auto fn = &kernels::cpu::layer_norm_grad<T>;
    if (weight.defined()) a.has_weight = true, a.weight = weight.ref<T>();
    if (param_grads) {
      a.param_grads = true;
      a.dweight = g.weight.ref<T>();
      a.dbias = g.bias.ref<T>();
      a.parts = parts.ref<double>();
    }
    // Each case lists exactly the storages the kernel touches.
    if (param_grads && a.has_weight)
      kernels::queue(id, x.device(), {dy.storage(), x.storage(), weight.storage(), stats.storage()},
                     {g.x.storage(), g.weight.storage(), g.bias.storage(), parts.storage()}, fn, a,
                     kernels::NoExtra{}, site);
    else if (param_grads)
      kernels::queue(id, x.device(), {dy.storage(), x.storage(), stats.storage()},
                     {g.x.storage(), g.weight.storage(), g.bias.storage(), parts.storage()}, fn, a,
                     kernels::NoExtra{}, site);
    else if (a.has_weight)
      kernels::queue(id, x.device(), {dy.storage(), x.storage(), weight.storage(), stats.storage()},
                     {g.x.storage()}, fn, a, kernels::NoExtra{}, site);
    else
      kernels::queue(id, x.device(), {dy.storage(), x.storage(), stats.storage()}, {g.x.storage()},
                     fn, a, kernels::NoExtra{}, site);
  });
  return g;
}

}  // namespace tide
