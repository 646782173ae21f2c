// The convolutional-network family's front-ends (ops/conv.h): argument checks, shape rules
// and gradients over the kernel entries of ops/conv_kernels.h (CPU: ops/cpu/conv.cpp).
// Not here: the kernels themselves, CUDA launchers, ceil_mode or dilation for pooling.
#include "ops/conv.h"

#include <limits>
#include <string>

#include "ops/autocast.h"
#include "ops/autograd.h"
#include "ops/conv_kernels.h"
#include "ops/half_compute.h"
#include "ops/kernel_entry.h"
#include "ops/op_util.h"
#include "ops/reduce.h"

namespace tide {

using namespace detail;
using Grads = std::vector<Tensor>;

namespace {

std::string pair_str(const std::array<int64_t, 2>& p) { return concat("(", p[0], ", ", p[1], ")"); }

std::string conv_opts_str(const Conv2dOptions& o) {
  return concat("stride ", pair_str(o.strides), ", padding ", pair_str(o.pads), ", dilation ",
                pair_str(o.dilations), ", groups ", o.group_count);
}

std::string pool_opts_str(const Pool2dOptions& o) {
  return concat("kernel ", pair_str(o.kernel), ", stride ", pair_str(o.strides), ", padding ",
                pair_str(o.pads));
}

// The sizes of a conv2d of an input of shape xs with a weight of shape ws, checked (the
// op's errors name both shapes and the options).
kernels::ConvGeom conv_geom(const char* op, const Shape& xs, const Shape& ws,
                            const Conv2dOptions& o) {
  auto what = [&] { return concat("x ", xs.str(), ", w ", ws.str(), ", ", conv_opts_str(o)); };
  TIDE_CHECK(xs.ndim() == 4 && ws.ndim() == 4, op,
             "expected x (N, C, H, W) and w (O, C / groups, KH, KW), got ", what());
  TIDE_CHECK(o.strides[0] >= 1 && o.strides[1] >= 1 && o.dilations[0] >= 1 && o.dilations[1] >= 1 &&
                 o.group_count >= 1 && o.pads[0] >= 0 && o.pads[1] >= 0,
             op, "needs stride, dilation and groups >= 1 and padding >= 0, got ", what());
  kernels::ConvGeom g;
  g.n = xs[0], g.c = xs[1], g.h = xs[2], g.w = xs[3];
  g.o = ws[0], g.kh = ws[2], g.kw = ws[3];
  g.sh = o.strides[0], g.sw = o.strides[1], g.ph = o.pads[0], g.pw = o.pads[1];
  g.dh = o.dilations[0], g.dw = o.dilations[1], g.groups = o.group_count;
  TIDE_CHECK(g.o >= 1 && ws[1] >= 1 && g.kh >= 1 && g.kw >= 1, op,
             "needs a weight with no zero extent, got ", what());
  TIDE_CHECK(g.c % g.groups == 0, op, "groups = ", g.groups, " does not divide the ", g.c,
             " input channels: ", what());
  TIDE_CHECK(g.o % g.groups == 0, op, "groups = ", g.groups, " does not divide the ", g.o,
             " output channels: ", what());
  TIDE_CHECK(ws[1] * g.groups == g.c, op, "channel mismatch: x has ", g.c,
             " channels but w expects ", ws[1], " per group x ", g.groups,
             " groups = ", ws[1] * g.groups, ": ", what());
  g.oh = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  // Integer division truncates towards zero: a negative numerator above -sh still gives 1.
  const bool fits =
      g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1 >= 0 && g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1 >= 0;
  TIDE_CHECK(fits, op, "the output would be empty (below 1x1): the dilated kernel (",
             g.dh * (g.kh - 1) + 1, ", ", g.dw * (g.kw - 1) + 1,
             ") is larger than the padded input (", g.h + 2 * g.ph, ", ", g.w + 2 * g.pw,
             "): ", what());
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  const int64_t k = ws[1] * g.kh * g.kw;
  TIDE_CHECK(k <= kMax && g.oh * g.ow <= kMax && g.o <= kMax, op,
             "sizes exceed the 32-bit dimension limit of BLAS: ", what());
  return g;
}

Shape conv_out_shape(const kernels::ConvGeom& g) { return Shape{g.n, g.o, g.oh, g.ow}; }

void check_grad_shape(const char* op, const Tensor& dy, const Shape& want, const char* rule) {
  TIDE_CHECK(dy.shape() == want, op, "dy ", describe(dy), " does not have ", rule,
             "'s output shape ", want.str());
}

kernels::PoolGeom pool_geom(const char* op, const Shape& xs, const Pool2dOptions& o) {
  auto what = [&] { return concat("x ", xs.str(), ", ", pool_opts_str(o)); };
  TIDE_CHECK(xs.ndim() == 4, op, "expected x (N, C, H, W), got ", what());
  TIDE_CHECK(o.kernel[0] >= 1 && o.kernel[1] >= 1 && o.strides[0] >= 1 && o.strides[1] >= 1, op,
             "needs kernel and stride >= 1, got ", what());
  TIDE_CHECK(o.pads[0] >= 0 && o.pads[1] >= 0 && 2 * o.pads[0] <= o.kernel[0] &&
                 2 * o.pads[1] <= o.kernel[1],
             op, "padding must be >= 0 and at most half the kernel, got ", what());
  TIDE_CHECK(xs[2] >= 1 && xs[3] >= 1, op, "needs H and W >= 1, got ", what());
  kernels::PoolGeom g;
  g.n = xs[0], g.c = xs[1], g.h = xs[2], g.w = xs[3];
  g.kh = o.kernel[0], g.kw = o.kernel[1], g.sh = o.strides[0], g.sw = o.strides[1];
  g.ph = o.pads[0], g.pw = o.pads[1];
  TIDE_CHECK(g.h + 2 * g.ph >= g.kh && g.w + 2 * g.pw >= g.kw, op,
             "the output would be empty (below 1x1): the kernel is larger than the padded "
             "input (",
             g.h + 2 * g.ph, ", ", g.w + 2 * g.pw, "): ", what());
  g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

}  // namespace

// ---- convolution ---------------------------------------------------------------------------

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt,
              Site site) {
  if (Tensor lx = x, lw = w, lb = bias; autocast::lower({&lx, &lw, &lb}, site))
    return conv2d(lx, lw, lb, opt, site);
  // 16-bit operands are one kernel on every device: the CPU's computes in float32 and rounds
  // once (ops/cpu/conv.cpp), CUDA's is cuDNN's with float sums (ops/cuda/conv.cu).
  const OpId id = OpId::conv2d;
  const char* op = op_name(id);
  check_same(x, w, id);
  check_floating(x, op);
  const kernels::ConvGeom g = conv_geom(op, x.shape(), w.shape(), opt);
  const bool has_bias = bias.defined();
  if (has_bias) {
    check_same(x, bias, id);
    TIDE_CHECK(bias.ndim() == 1 && bias.size(0) == g.o, op, "bias ", describe(bias),
               " must be (O) = (", g.o, ") for w ", describe(w));
  }
  Tensor y = Tensor::empty(conv_out_shape(g), x.dtype(), x.device(), op);
  if (y.numel() > 0)
    dispatch_floating_with_half(x.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::Conv2dForward<T> a{x.ref<T>(), w.ref<T>(), {}, y.ref<T>(), g, has_bias};
      if (has_bias) {
        a.bias = bias.ref<T>();
        kernels::queue(id, x.device(), {x.storage(), w.storage(), bias.storage()}, {y.storage()},
                       &kernels::cpu::conv2d<T>, a, kernels::NoExtra{}, site);
      } else {
        kernels::queue(id, x.device(), {x.storage(), w.storage()}, {y.storage()},
                       &kernels::cpu::conv2d<T>, a, kernels::NoExtra{}, site);
      }
    });
  const bool need_x = autograd::needs_grad({&x}), need_w = autograd::needs_grad({&w});
  const bool need_b = has_bias && autograd::needs_grad({&bias});
  autograd::record(
      op, y, {&x, &w, &bias},
      [x = x.detach(), w = w.detach(), opt, need_x, need_w, need_b](const Tensor& gy) {
        Tensor gx, gw, gb;
        if (need_x) gx = conv2d_input_grad(gy, w, x.shape(), opt);
        if (need_w) gw = conv2d_weight_grad(gy, x, w.shape(), opt);
        if (need_b) {  // 16-bit: summed in float32, rounded once
          const int64_t n = gy.size(0), o = gy.size(1);
          gb = detail::down(sum(sum(detail::up(gy).reshape({n, o, -1}), 2), 0), gy.dtype());
        }
        return Grads{gx, gw, gb};
      });
  return y;
}

Tensor conv2d_input_grad(const Tensor& dy, const Tensor& w, const Shape& input_shape,
                         const Conv2dOptions& opt, Site site) {
  const OpId id = OpId::conv2d_input_grad;
  const char* op = op_name(id);
  check_same(dy, w, id);
  check_floating(dy, op);
  const kernels::ConvGeom g = conv_geom(op, input_shape, w.shape(), opt);
  check_grad_shape(op, dy, conv_out_shape(g), "conv2d");
  Tensor dx = Tensor::empty(input_shape, dy.dtype(), dy.device(), op);
  if (dx.numel() > 0)
    dispatch_floating_with_half(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::queue(id, dy.device(), {dy.storage(), w.storage()}, {dx.storage()},
                     &kernels::cpu::conv2d_input_grad<T>,
                     kernels::Conv2dInputGrad<T>{dy.ref<T>(), w.ref<T>(), dx.ref<T>(), g},
                     kernels::NoExtra{}, site);
    });
  return dx;
}

Tensor conv2d_weight_grad(const Tensor& dy, const Tensor& x, const Shape& weight_shape,
                          const Conv2dOptions& opt, Site site) {
  const OpId id = OpId::conv2d_weight_grad;
  const char* op = op_name(id);
  check_same(dy, x, id);
  check_floating(dy, op);
  const kernels::ConvGeom g = conv_geom(op, x.shape(), weight_shape, opt);
  check_grad_shape(op, dy, conv_out_shape(g), "conv2d");
  Tensor dw = Tensor::empty(weight_shape, dy.dtype(), dy.device(), op);
  dispatch_floating_with_half(dy.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::queue(id, dy.device(), {dy.storage(), x.storage()}, {dw.storage()},
                   &kernels::cpu::conv2d_weight_grad<T>,
                   kernels::Conv2dWeightGrad<T>{dy.ref<T>(), x.ref<T>(), dw.ref<T>(), g},
                   kernels::NoExtra{}, site);
  });
  return dw;
}

// ---- pooling -------------------------------------------------------------------------------

namespace {

// The shared part of max_pool2d and avg_pool2d: checks, the output, the queued kernel
// (Args<T>{x, y, geometry}; kernel_of(T{}) names the CPU entry).
template <template <class> class Args, class KernelOf>
Tensor pool_forward(OpId id, const Tensor& x, const Pool2dOptions& opt, KernelOf kernel_of,
                    Site site) {
  const char* op = op_name(id);
  check_defined(x, op);
  check_supported(x, id);
  check_floating(x, op);
  const kernels::PoolGeom g = pool_geom(op, x.shape(), opt);
  Tensor y = Tensor::empty(Shape{g.n, g.c, g.oh, g.ow}, x.dtype(), x.device(), op);
  if (y.numel() > 0)
    dispatch_floating(x.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::queue(id, x.device(), {x.storage()}, {y.storage()}, kernel_of(z),
                     Args<T>{x.ref<T>(), y.ref<T>(), g}, kernels::NoExtra{}, site);
    });
  return y;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt, Site site) {
  Tensor y = pool_forward<kernels::MaxPool2d>(
      OpId::max_pool2d, x, opt, [](auto z) { return &kernels::cpu::max_pool2d<decltype(z)>; },
      site);
  autograd::record(OpId::max_pool2d, y, {&x}, [x = x.detach(), opt](const Tensor& gy) {
    return Grads{max_pool2d_grad(gy, x, opt)};
  });
  return y;
}

Tensor max_pool2d_grad(const Tensor& dy, const Tensor& x, const Pool2dOptions& opt, Site site) {
  const OpId id = OpId::max_pool2d_grad;
  const char* op = op_name(id);
  check_same(dy, x, id);
  check_floating(dy, op);
  const kernels::PoolGeom g = pool_geom(op, x.shape(), opt);
  check_grad_shape(op, dy, Shape{g.n, g.c, g.oh, g.ow}, "max_pool2d");
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device(), op);
  if (dx.numel() > 0)
    dispatch_floating(x.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::queue(id, x.device(), {dy.storage(), x.storage()}, {dx.storage()},
                     &kernels::cpu::max_pool2d_grad<T>,
                     kernels::MaxPool2dGrad<T>{dy.ref<T>(), x.ref<T>(), dx.ref<T>(), g},
                     kernels::NoExtra{}, site);
    });
  return dx;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt, Site site) {
  Tensor y = pool_forward<kernels::AvgPool2d>(
      OpId::avg_pool2d, x, opt, [](auto z) { return &kernels::cpu::avg_pool2d<decltype(z)>; },
      site);
  autograd::record(op_name(OpId::avg_pool2d), y, {&x}, [shape = x.shape(), opt](const Tensor& gy) {
    return Grads{avg_pool2d_grad(gy, shape, opt)};
  });
  return y;
}

Tensor avg_pool2d_grad(const Tensor& dy, const Shape& input_shape, const Pool2dOptions& opt,
                       Site site) {
  const OpId id = OpId::avg_pool2d_grad;
  const char* op = op_name(id);
  check_defined(dy, op);
  check_supported(dy, id);
  check_floating(dy, op);
  const kernels::PoolGeom g = pool_geom(op, input_shape, opt);
  check_grad_shape(op, dy, Shape{g.n, g.c, g.oh, g.ow}, "avg_pool2d");
  Tensor dx = Tensor::empty(input_shape, dy.dtype(), dy.device(), op);
  if (dx.numel() > 0)
    dispatch_floating(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::queue(
          id, dy.device(), {dy.storage()}, {dx.storage()}, &kernels::cpu::avg_pool2d_grad<T>,
          kernels::AvgPool2dGrad<T>{dy.ref<T>(), dx.ref<T>(), g}, kernels::NoExtra{}, site);
    });
  return dx;
}

// ---- batch normalisation -------------------------------------------------------------------

namespace {

// x (N, C, ...) as (n, c, s).
struct BnDims {
  int64_t n, c, s;
};

BnDims bn_dims(const char* op, const Tensor& x) {
  TIDE_CHECK(x.ndim() >= 2, op, "expected x (N, C, ...) of rank >= 2, got ", describe(x));
  int64_t s = 1;
  for (int d = 2; d < x.ndim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s};
}

void check_channel_vector(OpId id, const Tensor& x, const Tensor& t, const char* what) {
  const char* op = op_name(id);
  check_same(x, t, id);
  TIDE_CHECK(t.ndim() == 1 && t.size(0) == x.size(1), op, what, " ", describe(t),
             " must be (C) = (", x.size(1), ") for x ", describe(x));
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps, Site site) {
  if (Tensor fx = x, fw = weight, fb = bias; autocast::raise({&fx, &fw, &fb}, site))
    return batch_norm(fx, fw, fb, running_mean, running_var, training, momentum, eps, site);
  const OpId id = OpId::batch_norm;
  const char* op = op_name(id);
  check_defined(x, op);
  check_supported(x, id);
  check_floating(x, op);
  const BnDims d = bn_dims(op, x);
  check_channel_vector(id, x, weight, "weight");
  check_channel_vector(id, x, bias, "bias");
  const bool has_running = running_mean.defined() || running_var.defined();
  TIDE_CHECK(running_mean.defined() == running_var.defined(), op,
             "needs both running_mean and running_var or neither");
  if (has_running) {
    check_channel_vector(id, x, running_mean, "running_mean");
    check_channel_vector(id, x, running_var, "running_var");
  }
  TIDE_CHECK(training || has_running, op,
             "eval mode (training = false) needs running_mean and running_var");
  TIDE_CHECK(momentum >= 0.0 && momentum <= 1.0 && eps > 0.0, op,
             "needs 0 <= momentum <= 1 and eps > 0, got momentum ", momentum, ", eps ", eps);
  TIDE_CHECK(!training || d.n * d.s > 1, op,
             "training needs more than one value per channel, got x ", describe(x));
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), op);
  Tensor stats = Tensor::empty(Shape{2, d.c}, x.dtype(), x.device(), op);
  if (stats.numel() > 0)
    dispatch_floating(x.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::BatchNorm<T> a{x.ref<T>(), weight.ref<T>(), bias.ref<T>(), {},  {},
                              y.ref<T>(), stats.ref<T>(),  d.n,           d.c, d.s,
                              training,   has_running,     momentum,      eps};
      if (has_running) {
        a.running_mean = running_mean.ref<T>();
        a.running_var = running_var.ref<T>();
      }
      auto fn = &kernels::cpu::batch_norm<T>;
      if (training && has_running)  // the running estimates are updated in place
        kernels::queue(
            id, x.device(), {x.storage(), weight.storage(), bias.storage()},
            {y.storage(), stats.storage(), running_mean.storage(), running_var.storage()}, fn, a,
            kernels::NoExtra{}, site);
      else if (training)
        kernels::queue(id, x.device(), {x.storage(), weight.storage(), bias.storage()},
                       {y.storage(), stats.storage()}, fn, a, kernels::NoExtra{}, site);
      else
        kernels::queue(id, x.device(),
                       {x.storage(), weight.storage(), bias.storage(), running_mean.storage(),
                        running_var.storage()},
                       {y.storage(), stats.storage()}, fn, a, kernels::NoExtra{}, site);
    });
  autograd::record(op, y, {&x, &weight, &bias},
                   [x = x.detach(), w = weight.detach(), stats, training](const Tensor& gy) {
                     BatchNormGrads g = batch_norm_grad(gy, x, w, stats, training);
                     return Grads{g.x, g.weight, g.bias};
                   });
  return y;
}

BatchNormGrads batch_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& weight,
                               const Tensor& stats, bool training, Site site) {
  const OpId id = OpId::batch_norm_grad;
  const char* op = op_name(id);
  check_same(dy, x, id);
  check_floating(x, op);
  const BnDims d = bn_dims(op, x);
  TIDE_CHECK(dy.shape() == x.shape(), op, "dy ", describe(dy), " must have x's shape ",
             describe(x));
  check_channel_vector(id, x, weight, "weight");
  check_same(x, stats, id);
  TIDE_CHECK(stats.shape() == Shape({2, d.c}), op, "stats ", describe(stats),
             " must be (2, C) = (2, ", d.c, ") for x ", describe(x));
  BatchNormGrads g{Tensor::empty(x.shape(), x.dtype(), x.device(), op),
                   Tensor::empty(Shape{d.c}, x.dtype(), x.device(), op),
                   Tensor::empty(Shape{d.c}, x.dtype(), x.device(), op)};
  if (d.c > 0)
    dispatch_floating(x.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::queue(id, x.device(), {dy.storage(), x.storage(), weight.storage(), stats.storage()},
                     {g.x.storage(), g.weight.storage(), g.bias.storage()},
                     &kernels::cpu::batch_norm_grad<T>,
                     kernels::BatchNormGrad<T>{dy.ref<T>(), x.ref<T>(), weight.ref<T>(),
                                               stats.ref<T>(), g.x.ref<T>(), g.weight.ref<T>(),
                                               g.bias.ref<T>(), d.n, d.c, d.s, training},
                     kernels::NoExtra{}, site);
    });
  return g;
}

// ---- flatten -------------------------------------------------------------------------------

Tensor flatten(const Tensor& x, int start_dim) {
  const char* op = op_name(OpId::flatten);
  check_defined(x, op);
  TIDE_CHECK(x.ndim() >= 1 && start_dim >= 0 && start_dim < x.ndim(), op, "start_dim ", start_dim,
             " is outside [0, rank) for x ", describe(x));
  std::vector<int64_t> dims(x.shape().begin(), x.shape().begin() + start_dim);
  int64_t rest = 1;
  for (int i = start_dim; i < x.ndim(); ++i) rest *= x.size(i);
  dims.push_back(rest);
  Tensor v;
  {
    NoGrad no_grad;  // one node named flatten, not reshape's
    v = x.reshape(dims);
  }
  autograd::record(op, v, {&x},
                   [from = x.shape().vec()](const Tensor& g) { return Grads{g.reshape(from)}; });
  return v;
}

}  // namespace tide
