// The convolutional-network family (ops/conv.h): conv2d and its two gradient ops, max and
// average pooling and their gradients, batch_norm (training and eval) and its gradient,
// and flatten, against double-precision loops written here; gradients by float64 central
// differences; running-estimate updates; argument errors; traced replays bitwise equal to
// eager; no CUDA kernel on a real GPU.
#include <cmath>
#include <limits>

#include "core/cuda/runtime.h"
#include "core/determinism.h"
#include "ops/channel_parts.h"
#include "tests/ops/op_harness.h"
#include "trace/function.h"

namespace tide {
namespace {

using test::Array;
using test::Check;
using test::OpCase;
using test::ShapeSet;
using test::Tol;
using V = std::vector<Tensor>;

// ---- references ----------------------------------------------------------------------------

struct ConvSpec {
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  Conv2dOptions opts() const {
    return Conv2dOptions().stride(sh, sw).padding(ph, pw).dilation(dh, dw).groups(groups);
  }
  int64_t out(int64_t in, int64_t k, bool height) const {
    const int64_t s = height ? sh : sw, p = height ? ph : pw, d = height ? dh : dw;
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
  }
};

// Calls f(n, o, oy, ox, c, i, j, iy, ix) for every product term of the convolution of
// x shape xs with weight shape ws whose input position lies inside x.
template <class F>
void conv_terms(const Shape& xs, const Shape& ws, const ConvSpec& s, F&& f) {
  const int64_t n = xs[0], c = xs[1], h = xs[2], w = xs[3];
  const int64_t o = ws[0], cg = ws[1], kh = ws[2], kw = ws[3], og = o / s.groups;
  const int64_t oh = s.out(h, kh, true), ow = s.out(w, kw, false);
  (void)c;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          for (int64_t cl = 0; cl < cg; ++cl)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iy = oy * s.sh - s.ph + i * s.dh, ix = ox * s.sw - s.pw + j * s.dw;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                f(b, oc, oy, ox, (oc / og) * cg + cl, cl, i, j, iy, ix);
              }
}

int64_t at4(const Shape& s, int64_t a, int64_t b, int64_t c, int64_t d) {
  return ((a * s[1] + b) * s[2] + c) * s[3] + d;
}

Array conv_ref(const Array& x, const Array& w, const Array* bias, const ConvSpec& s) {
  const Shape ys{x.shape[0], w.shape[0], s.out(x.shape[2], w.shape[2], true),
                 s.out(x.shape[3], w.shape[3], false)};
  Array y{ys, std::vector<double>(size_t(ys.numel()), 0.0)};
  conv_terms(x.shape, w.shape, s,
             [&](int64_t b, int64_t oc, int64_t oy, int64_t ox, int64_t c, int64_t cl, int64_t i,
                 int64_t j, int64_t iy, int64_t ix) {
               y.v[size_t(at4(ys, b, oc, oy, ox))] += w.v[size_t(at4(w.shape, oc, cl, i, j))] *
                                                      x.v[size_t(at4(x.shape, b, c, iy, ix))];
             });
  if (bias)
    for (int64_t k = 0; k < ys.numel(); ++k)
      y.v[size_t(k)] += bias->v[size_t((k / (ys[2] * ys[3])) % ys[1])];
  return y;
}

// ---- convolution cases ---------------------------------------------------------------------

struct ConvGeomCase {
  const char* what;
  ConvSpec spec;
  Shape x, w;
  bool bias;
};

// Shapes chosen so that every option shows: stride 2, padding, dilation 2, groups 2, no
// bias, non-square kernels and strides, and one size past the parallel grain.
std::vector<ConvGeomCase> conv_geoms() {
  return {
      {"plain", {}, Shape{2, 3, 5, 6}, Shape{4, 3, 3, 3}, true},
      {"stride 2, padding 1",
       {.sh = 2, .sw = 2, .ph = 1, .pw = 1},
       Shape{2, 2, 7, 6},
       Shape{3, 2, 3, 2},
       true},
      {"dilation 2, padding 2",
       {.ph = 2, .pw = 2, .dh = 2, .dw = 2},
       Shape{1, 2, 6, 7},
       Shape{2, 2, 3, 3},
       true},
      {"groups 2, no bias", {.groups = 2}, Shape{2, 4, 5, 5}, Shape{6, 2, 3, 3}, false},
      {"mixed",
       {.sh = 2, .sw = 1, .ph = 0, .pw = 1, .dh = 1, .dw = 2, .groups = 2},
       Shape{1, 4, 6, 5},
       Shape{4, 2, 2, 3},
       true},
      {"1x1, 1 channel", {}, Shape{3, 1, 4, 4}, Shape{2, 1, 1, 1}, true},
  };
}

TIDE_OP_CASES(Conv, Conv2d) {
  std::vector<OpCase> cases;
  for (const ConvGeomCase& gc : conv_geoms()) {
    ShapeSet small{gc.x, gc.w};
    if (gc.bias) small.push_back(Shape{gc.w[0]});
    const ConvSpec s = gc.spec;
    const bool bias = gc.bias;
    OpCase c{.op = OpId::conv2d,
             .build =
                 [s, bias](const V& in) {
                   return conv2d(in[0], in[1], bias ? in[2] : Tensor(), s.opts());
                 },
             .ref =
                 [s, bias](const std::vector<Array>& in) {
                   return conv_ref(in[0], in[1], bias ? &in[2] : nullptr, s);
                 },
             .shapes = [small](std::mt19937&) { return std::vector<ShapeSet>{small}; },
             .tol32 = Tol{1e-5, 1e-4},
             .grad = true,
             .grad_max_numel = 400,
             .label = std::string("Conv.Conv2d ") + gc.what};
    cases.push_back(c);
  }
  // Large: the parallel im2col / bias loops and several GEMMs per batch (values only).
  const ConvSpec s{.ph = 1, .pw = 1};
  cases.push_back(OpCase{
      .op = OpId::conv2d,
      .build = [s](const V& in) { return conv2d(in[0], in[1], in[2], s.opts()); },
      .ref = [s](const std::vector<Array>& in) { return conv_ref(in[0], in[1], &in[2], s); },
      .shapes =
          [](std::mt19937&) {
            return std::vector<ShapeSet>{{Shape{3, 8, 28, 27}, Shape{16, 8, 3, 3}, Shape{16}}};
          },
      .tol32 = Tol{1e-4, 1e-4}});
  return cases;
}

TIDE_OP_CASES(Conv, Conv2dInputGrad) {
  std::vector<OpCase> cases;
  for (const ConvGeomCase& gc : conv_geoms()) {
    const ConvSpec s = gc.spec;
    const Shape xs = gc.x, ws = gc.w;
    const Shape ys{xs[0], ws[0], s.out(xs[2], ws[2], true), s.out(xs[3], ws[3], false)};
    cases.push_back(OpCase{
        .op = OpId::conv2d_input_grad,
        .build = [s, xs](const V& in) { return conv2d_input_grad(in[0], in[1], xs, s.opts()); },
        .ref =
            [s, xs](const std::vector<Array>& in) {
              const Array &dy = in[0], &w = in[1];
              Array dx{xs, std::vector<double>(size_t(xs.numel()), 0.0)};
              conv_terms(xs, w.shape, s,
                         [&](int64_t b, int64_t oc, int64_t oy, int64_t ox, int64_t c, int64_t cl,
                             int64_t i, int64_t j, int64_t iy, int64_t ix) {
                           dx.v[size_t(at4(xs, b, c, iy, ix))] +=
                               w.v[size_t(at4(w.shape, oc, cl, i, j))] *
                               dy.v[size_t(at4(dy.shape, b, oc, oy, ox))];
                         });
              return dx;
            },
        .shapes =
            [ys, ws](std::mt19937&) {
              return std::vector<ShapeSet>{{ys, ws}};
            },
        .tol32 = Tol{1e-5, 1e-4},
        .label = std::string("Conv.Conv2dInputGrad ") + gc.what});
  }
  return cases;
}

TIDE_OP_CASES(Conv, Conv2dWeightGrad) {
  std::vector<OpCase> cases;
  for (const ConvGeomCase& gc : conv_geoms()) {
    const ConvSpec s = gc.spec;
    const Shape xs = gc.x, ws = gc.w;
    const Shape ys{xs[0], ws[0], s.out(xs[2], ws[2], true), s.out(xs[3], ws[3], false)};
    cases.push_back(OpCase{
        .op = OpId::conv2d_weight_grad,
        .build = [s, ws](const V& in) { return conv2d_weight_grad(in[0], in[1], ws, s.opts()); },
        .ref =
            [s, ws](const std::vector<Array>& in) {
              const Array &dy = in[0], &x = in[1];
              Array dw{ws, std::vector<double>(size_t(ws.numel()), 0.0)};
              conv_terms(x.shape, ws, s,
                         [&](int64_t b, int64_t oc, int64_t oy, int64_t ox, int64_t c, int64_t cl,
                             int64_t i, int64_t j, int64_t iy, int64_t ix) {
                           dw.v[size_t(at4(ws, oc, cl, i, j))] +=
                               x.v[size_t(at4(x.shape, b, c, iy, ix))] *
                               dy.v[size_t(at4(dy.shape, b, oc, oy, ox))];
                         });
              return dw;
            },
        .shapes =
            [ys, xs](std::mt19937&) {
              return std::vector<ShapeSet>{{ys, xs}};
            },
        .tol32 = Tol{1e-5, 1e-4},
        .label = std::string("Conv.Conv2dWeightGrad ") + gc.what});
  }
  return cases;
}

// ---- pooling -------------------------------------------------------------------------------

struct PoolSpec {
  int64_t kh, kw, sh, sw, ph, pw;
  Pool2dOptions opts() const { return Pool2dOptions(kh, kw).stride(sh, sw).padding(ph, pw); }
  int64_t oh(int64_t h) const { return (h + 2 * ph - kh) / sh + 1; }
  int64_t ow(int64_t w) const { return (w + 2 * pw - kw) / sw + 1; }
  // The smallest input extent that gives `out` outputs.
  int64_t in_h(int64_t out) const { return (out - 1) * sh + kh - 2 * ph; }
  int64_t in_w(int64_t out) const { return (out - 1) * sw + kw - 2 * pw; }
};

std::vector<PoolSpec> pool_specs() {
  // 2x2 and 3x3 without padding take the CPU's unrolled path, the others the generic one.
  return {{2, 2, 2, 2, 0, 0},
          {3, 3, 1, 1, 0, 0},
          {3, 3, 2, 2, 1, 1},
          {2, 3, 1, 2, 1, 0},
          {3, 2, 3, 1, 0, 1}};
}

std::vector<ShapeSet> pool_shapes(std::mt19937&) {
  return {{Shape{2, 3, 6, 7}}, {Shape{1, 1, 5, 4}}, {Shape{2, 16, 40, 40}}};
}

// Calls f(plane, oy, ox, iy, ix) for every in-bounds element of every window of x (shape
// xs), windows in output order and elements in row-major order within each.
template <class F>
void pool_terms(const Shape& xs, const PoolSpec& s, F&& f) {
  for (int64_t p = 0; p < xs[0] * xs[1]; ++p)
    for (int64_t oy = 0; oy < s.oh(xs[2]); ++oy)
      for (int64_t ox = 0; ox < s.ow(xs[3]); ++ox)
        for (int64_t i = 0; i < s.kh; ++i)
          for (int64_t j = 0; j < s.kw; ++j) {
            const int64_t iy = oy * s.sh - s.ph + i, ix = ox * s.sw - s.pw + j;
            if (iy >= 0 && iy < xs[2] && ix >= 0 && ix < xs[3]) f(p, oy, ox, iy, ix);
          }
}

Shape pooled(const Shape& xs, const PoolSpec& s) {
  return Shape{xs[0], xs[1], s.oh(xs[2]), s.ow(xs[3])};
}

// For each output element, the flat index in x of its window's first maximum.
std::vector<int64_t> argmax_ref(const Array& x, const PoolSpec& s) {
  const Shape ys = pooled(x.shape, s);
  std::vector<int64_t> best(size_t(ys.numel()), -1);
  const int64_t hw = x.shape[2] * x.shape[3];
  pool_terms(x.shape, s, [&](int64_t p, int64_t oy, int64_t ox, int64_t iy, int64_t ix) {
    int64_t& b = best[size_t((p * ys[2] + oy) * ys[3] + ox)];
    const int64_t k = p * hw + iy * x.shape[3] + ix;
    if (b < 0 || x.v[size_t(k)] > x.v[size_t(b)]) b = k;
  });
  return best;
}

TIDE_OP_CASES(Conv, MaxPool2d) {
  std::vector<OpCase> cases;
  for (const PoolSpec& s : pool_specs())
    cases.push_back(OpCase{.op = OpId::max_pool2d,
                           .build = [s](const V& in) { return max_pool2d(in[0], s.opts()); },
                           .ref =
                               [s](const std::vector<Array>& in) {
                                 Array y{pooled(in[0].shape, s), {}};
                                 for (int64_t k : argmax_ref(in[0], s))
                                   y.v.push_back(in[0].v[size_t(k)]);
                                 return y;
                               },
                           .shapes = pool_shapes,
                           .gen = test::gen_distinct(),  // no ties: a smooth neighbourhood
                           .grad = true});
  return cases;
}

TIDE_OP_CASES(Conv, MaxPool2dGrad) {
  std::vector<OpCase> cases;
  for (const PoolSpec& s : pool_specs())
    cases.push_back(
        OpCase{.op = OpId::max_pool2d_grad,
               .build = [s](const V& in) { return max_pool2d_grad(in[0], in[1], s.opts()); },
               .ref =
                   [s](const std::vector<Array>& in) {
                     Array dx{in[1].shape, std::vector<double>(in[1].v.size(), 0.0)};
                     std::vector<int64_t> best = argmax_ref(in[1], s);
                     for (size_t k = 0; k < best.size(); ++k) dx.v[size_t(best[k])] += in[0].v[k];
                     return dx;
                   },
               .shapes =
                   [s](std::mt19937& rng) {
                     std::vector<ShapeSet> sets;
                     for (const ShapeSet& x : pool_shapes(rng))
                       sets.push_back({pooled(x[0], s), x[0]});
                     return sets;
                   },
               .gen = test::gen_ints(-3, 3)});  // many ties: the first maximum must take them
  return cases;
}

TIDE_OP_CASES(Conv, AvgPool2d) {
  std::vector<OpCase> cases;
  for (const PoolSpec& s : pool_specs())
    cases.push_back(
        OpCase{.op = OpId::avg_pool2d,
               .build = [s](const V& in) { return avg_pool2d(in[0], s.opts()); },
               .ref =
                   [s](const std::vector<Array>& in) {
                     const Shape ys = pooled(in[0].shape, s);
                     Array y{ys, std::vector<double>(size_t(ys.numel()), 0.0)};
                     const int64_t hw = in[0].shape[2] * in[0].shape[3];
                     pool_terms(in[0].shape, s,
                                [&](int64_t p, int64_t oy, int64_t ox, int64_t iy, int64_t ix) {
                                  y.v[size_t((p * ys[2] + oy) * ys[3] + ox)] +=
                                      in[0].v[size_t(p * hw + iy * in[0].shape[3] + ix)] /
                                      double(s.kh * s.kw);  // padding counts
                                });
                     return y;
                   },
               .shapes = pool_shapes,
               .grad = true});
  return cases;
}

TIDE_OP_CASES(Conv, AvgPool2dGrad) {
  std::vector<OpCase> cases;
  for (const PoolSpec& s : pool_specs()) {
    auto x_shape = [s](const Shape& ys) {
      return Shape{ys[0], ys[1], s.in_h(ys[2]), s.in_w(ys[3])};
    };
    cases.push_back(OpCase{
        .op = OpId::avg_pool2d_grad,
        .build =
            [s, x_shape](const V& in) {
              return avg_pool2d_grad(in[0], x_shape(in[0].shape()), s.opts());
            },
        .ref =
            [s, x_shape](const std::vector<Array>& in) {
              const Shape xs = x_shape(in[0].shape);
              Array dx{xs, std::vector<double>(size_t(xs.numel()), 0.0)};
              const int64_t oh = in[0].shape[2], ow = in[0].shape[3];
              pool_terms(xs, s, [&](int64_t p, int64_t oy, int64_t ox, int64_t iy, int64_t ix) {
                dx.v[size_t((p * xs[2] + iy) * xs[3] + ix)] +=
                    in[0].v[size_t((p * oh + oy) * ow + ox)] / double(s.kh * s.kw);
              });
              return dx;
            },
        .shapes =
            [](std::mt19937&) {
              return std::vector<ShapeSet>{{Shape{2, 3, 3, 4}}, {Shape{1, 2, 2, 2}}};
            }});
  }
  return cases;
}

// Ties go to the first maximum in row-major order, padding never wins.
TIDE_OP_TEST(Conv, MaxPoolTiesGoToTheFirst, {OpId::max_pool2d_grad, Check::value}) {
  Tensor x = ones({1, 1, 3, 3}, DType::float64).requires_grad_();
  Tensor y = max_pool2d(x, Pool2dOptions(2).stride(1));  // 2x2 windows over 3x3, all ties
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1, 1, 1, 1}));
  sum(y).backward();
  // Each window's top-left element: the first in row-major order (the last would be 4, 5, 7, 8).
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 1, 0, 1, 1, 0, 0, 0, 0}));
  Tensor neg = from_vector<float>({-3, -2, -1, -4}, Shape{1, 1, 2, 2});
  EXPECT_EQ(max_pool2d(neg, Pool2dOptions(3).stride(1).padding(1)).to_vector<float>(),
            (std::vector<float>{-1, -1, -1, -1}))
      << "padding counts as -infinity, not 0";
}

// A NaN in a window wins (PyTorch's rule) and takes the gradient: the first NaN when there
// are several, on the unrolled 2x2 / 3x3 path and the generic (padded) one alike.
TIDE_OP_TEST(Conv, MaxPoolNanWins, {OpId::max_pool2d_grad, Check::value}) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Pool2dOptions& opt :
       {Pool2dOptions(2), Pool2dOptions(3).stride(1), Pool2dOptions(3).stride(1).padding(1)}) {
    // 4x4 with NaNs at (0, 1) and (1, 0), both in the first window; 9 the largest number.
    Tensor x =
        from_vector<float>({1, nan, 2, 3, nan, 9, 4, 5, 6, 7, 8, 0, 1, 2, 3, 4}, Shape{1, 1, 4, 4})
            .requires_grad_();
    Tensor y = max_pool2d(x, opt);
    EXPECT_TRUE(std::isnan(y.to_vector<float>()[0])) << "the first window holds NaNs";
    // The gradient of the first window's output alone.
    std::vector<float> first(size_t(y.numel()), 0.0f);
    first[0] = 1.0f;
    sum(y * from_vector<float>(first, y.shape())).backward();
    const std::vector<float> g = x.grad().to_vector<float>();
    EXPECT_EQ(g[1], 1.0f) << "the first NaN in row-major order takes the gradient";
    EXPECT_EQ(g[4], 0.0f) << "the second NaN does not";
    EXPECT_EQ(g[5], 0.0f) << "nor the largest number";
  }
}

// ---- batch normalisation -------------------------------------------------------------------

// Per-channel mean and biased variance of x (N, C, ...).
void channel_stats(const Array& x, std::vector<double>& mean, std::vector<double>& var) {
  const int64_t n = x.shape[0], c = x.shape[1], s = x.shape.numel() / std::max<int64_t>(1, n * c);
  mean.assign(size_t(c), 0.0);
  var.assign(size_t(c), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < s; ++j)
        mean[size_t(ch)] += x.v[size_t((b * c + ch) * s + j)] / double(n * s);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < s; ++j) {
        const double d = x.v[size_t((b * c + ch) * s + j)] - mean[size_t(ch)];
        var[size_t(ch)] += d * d / double(n * s);
      }
}

// Fixed running estimates for eval mode.
std::vector<double> eval_mean(int64_t c) {
  std::vector<double> v;
  for (int64_t i = 0; i < c; ++i) v.push_back(0.25 * double(i) - 0.3);
  return v;
}
std::vector<double> eval_var(int64_t c) {
  std::vector<double> v;
  for (int64_t i = 0; i < c; ++i) v.push_back(0.5 + 0.3 * double(i));
  return v;
}

constexpr double kEps = 1e-5;

Array bn_ref(const std::vector<Array>& in, bool training) {
  const Array &x = in[0], &w = in[1], &b = in[2];
  const int64_t c = x.shape[1], s = x.shape.numel() / std::max<int64_t>(1, x.shape[0] * c);
  std::vector<double> mean, var;
  if (training) channel_stats(x, mean, var);
  else mean = eval_mean(c), var = eval_var(c);
  Array y{x.shape, x.v};
  for (size_t k = 0; k < y.v.size(); ++k) {
    const size_t ch = size_t((int64_t(k) / s) % c);
    y.v[k] = (x.v[k] - mean[ch]) / std::sqrt(var[ch] + kEps) * w.v[ch] + b.v[ch];
  }
  return y;
}

std::vector<ShapeSet> bn_shapes(std::mt19937&) {
  return {{Shape{4, 3, 2, 3}, Shape{3}, Shape{3}},
          {Shape{3, 2, 5}, Shape{2}, Shape{2}},
          {Shape{6, 4}, Shape{4}, Shape{4}},
          {Shape{8, 16, 12, 12}, Shape{16}, Shape{16}}};
}

TIDE_OP_CASES(Conv, BatchNorm) {
  OpCase train{.op = OpId::batch_norm,
               .build =
                   [](const V& in) {
                     const int64_t c = in[0].size(1);
                     Tensor rm = zeros({c}, in[0].dtype(), in[0].device());
                     Tensor rv = ones({c}, in[0].dtype(), in[0].device());
                     return batch_norm(in[0], in[1], in[2], rm, rv, true, 0.1, kEps);
                   },
               .ref = [](const std::vector<Array>& in) { return bn_ref(in, true); },
               .shapes = bn_shapes,
               .tol32 = Tol{1e-5, 1e-4},
               .grad = true,
               .grad_tol = Tol{1e-5, 1e-4}};
  OpCase eval = train;
  eval.build = [](const V& in) {
    const int64_t c = in[0].size(1);
    Tensor rm = from_data(eval_mean(c), Shape{c}, in[0].dtype(), in[0].device());
    Tensor rv = from_data(eval_var(c), Shape{c}, in[0].dtype(), in[0].device());
    return batch_norm(in[0], in[1], in[2], rm, rv, false, 0.1, kEps);
  };
  eval.ref = [](const std::vector<Array>& in) { return bn_ref(in, false); };
  OpCase no_running = train;  // training without running estimates
  no_running.build = [](const V& in) {
    return batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true, 0.1, kEps);
  };
  no_running.grad = false;
  // Channels of 9216 elements: a GPU splits each channel's sums over several blocks
  // (ops/channel_parts.h), which the small shapes never do. Values only (the finite
  // differences over 18k inputs would take long).
  OpCase large = train;
  large.shapes = [](std::mt19937&) {
    return std::vector<ShapeSet>{{Shape{16, 2, 24, 24}, Shape{2}, Shape{2}}};
  };
  large.grad = false;
  return {train, eval, no_running, large};
}

// batch_norm_grad's three outputs, each against the closed form from the same statistics.
TIDE_OP_CASES(Conv, BatchNormGrad) {
  std::vector<OpCase> cases;
  for (bool training : {true, false})
    for (int which = 0; which < 3; ++which) {
      OpCase c{.op = OpId::batch_norm_grad,
               .build =
                   [training, which](const V& in) {
                     // in: dy, x, weight. The statistics come from x's values (training) or the
                     // fixed running estimates.
                     Array x{in[1].shape(), in[1].to_vector<double>()};
                     const int64_t ch = x.shape[1];
                     std::vector<double> mean, var;
                     if (training) channel_stats(x, mean, var);
                     else mean = eval_mean(ch), var = eval_var(ch);
                     std::vector<double> st = mean;
                     for (double v : var) st.push_back(1.0 / std::sqrt(v + kEps));
                     Tensor stats = from_data(st, Shape{2, ch}, in[1].dtype(), in[1].device());
                     BatchNormGrads g = batch_norm_grad(in[0], in[1], in[2], stats, training);
                     return which == 0 ? g.x : which == 1 ? g.weight : g.bias;
                   },
               .ref =
                   [training, which](const std::vector<Array>& in) {
                     const Array &dy = in[0], &x = in[1], &w = in[2];
                     const int64_t n = x.shape[0], c = x.shape[1], s = x.shape.numel() / (n * c);
                     const double m = double(n * s);
                     std::vector<double> mean, var;
                     if (training) channel_stats(x, mean, var);
                     else mean = eval_mean(c), var = eval_var(c);
                     std::vector<double> sdy(size_t(c), 0.0), sdyx(size_t(c), 0.0);
                     auto xhat = [&](size_t k, size_t ch) {
                       return (x.v[k] - mean[ch]) / std::sqrt(var[ch] + kEps);
                     };
                     for (size_t k = 0; k < x.v.size(); ++k) {
                       const size_t ch = size_t((int64_t(k) / s) % c);
                       sdy[ch] += dy.v[k];
                       sdyx[ch] += dy.v[k] * xhat(k, ch);
                     }
                     if (which == 1) return Array{Shape{c}, sdyx};
                     if (which == 2) return Array{Shape{c}, sdy};
                     Array dx{x.shape, x.v};
                     for (size_t k = 0; k < x.v.size(); ++k) {
                       const size_t ch = size_t((int64_t(k) / s) % c);
                       const double g =
                           training ? dy.v[k] - sdy[ch] / m - xhat(k, ch) * sdyx[ch] / m : dy.v[k];
                       dx.v[k] = w.v[ch] / std::sqrt(var[ch] + kEps) * g;
                     }
                     return dx;
                   },
               .shapes =
                   [](std::mt19937& rng) {
                     std::vector<ShapeSet> sets;
                     for (const ShapeSet& s : bn_shapes(rng)) sets.push_back({s[0], s[0], s[1]});
                     // Several blocks per channel on a GPU (ops/channel_parts.h).
                     sets.push_back({Shape{16, 2, 24, 24}, Shape{16, 2, 24, 24}, Shape{2}});
                     return sets;
                   },
               .tol32 = Tol{1e-4, 1e-4}};
      cases.push_back(c);
    }
  return cases;
}

// Training updates the running estimates as PyTorch does (momentum, unbiased variance);
// eval mode leaves them alone.
TEST(Conv, BatchNormRunningEstimates) {
  const std::vector<double> xv{1, 2, 3, 4, 10, 20, 30, 50, -1, 0, 1, 5, 2, 2, 2, 6};
  Tensor x = from_data(xv, Shape{2, 2, 2, 2}, DType::float64);  // channel 0: 1,2,3,4,-1,0,1,5
  Tensor w = ones({2}, DType::float64), b = zeros({2}, DType::float64);
  Tensor rm = from_data({0.5, -1.0}, Shape{2}, DType::float64);
  Tensor rv = from_data({2.0, 3.0}, Shape{2}, DType::float64);
  (void)batch_norm(x, w, b, rm, rv, true, 0.25, kEps);
  std::vector<double> mean, var;
  channel_stats(Array{x.shape(), xv}, mean, var);
  const std::vector<double> want_rm{0.75 * 0.5 + 0.25 * mean[0], 0.75 * -1.0 + 0.25 * mean[1]};
  const std::vector<double> want_rv{0.75 * 2.0 + 0.25 * var[0] * 8 / 7,
                                    0.75 * 3.0 + 0.25 * var[1] * 8 / 7};
  std::vector<double> got_rm = rm.to_vector<double>(), got_rv = rv.to_vector<double>();
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(got_rm[size_t(i)], want_rm[size_t(i)], 1e-12);
    EXPECT_NEAR(got_rv[size_t(i)], want_rv[size_t(i)], 1e-12);
  }
  (void)batch_norm(x, w, b, rm, rv, false, 0.25, kEps).to_vector<double>();
  EXPECT_EQ(rm.to_vector<double>(), got_rm) << "eval mode must not update";
  EXPECT_EQ(rv.to_vector<double>(), got_rv);
}

// An empty batch in eval mode (training refuses it): an empty output, and batch_norm_grad
// still writes its weight and bias gradients (zero sums) on every device.
TIDE_OP_TEST(Conv, BatchNormEvalOnAnEmptyBatch, {OpId::batch_norm_grad, Check::value}) {
  std::vector<Device> devices{Device::cpu()};
  for (Device d : test::case_devices())
    if (op_supported(d, OpId::batch_norm_grad)) devices.push_back(d);
  for (Device d : devices) {
    Tensor x = zeros({0, 3, 2, 2}, DType::float32, d).requires_grad_();
    Tensor w = full({3}, 2.0, DType::float32, d).requires_grad_();
    Tensor b = full({3}, 0.5, DType::float32, d).requires_grad_();
    Tensor rm = zeros({3}, DType::float32, d), rv = ones({3}, DType::float32, d);
    Tensor y = batch_norm(x, w, b, rm, rv, /*training=*/false);
    EXPECT_EQ(y.shape(), (Shape{0, 3, 2, 2})) << d.str();
    // NaN-filled gradient buffers would show a kernel that skipped the write.
    sum(y).backward();
    EXPECT_EQ(w.grad().to(Device::cpu()).to_vector<float>(), (std::vector<float>{0, 0, 0}))
        << d.str();
    EXPECT_EQ(b.grad().to(Device::cpu()).to_vector<float>(), (std::vector<float>{0, 0, 0}))
        << d.str();
    EXPECT_EQ(x.grad().shape(), x.shape()) << d.str();
  }
}

// ---- flatten -------------------------------------------------------------------------------

TIDE_OP_CASES(Conv, Flatten) {
  auto flat_ref = [](int start) {
    return [start](const std::vector<Array>& in) {
      std::vector<int64_t> dims;
      int64_t rest = 1;
      for (int d = 0; d < in[0].shape.ndim(); ++d)
        if (d < start) dims.push_back(in[0].shape[d]);
        else rest *= in[0].shape[d];
      dims.push_back(rest);
      return Array{Shape(dims), in[0].v};
    };
  };
  auto shapes = [](std::mt19937& rng) {
    return std::vector<ShapeSet>{
        {Shape{2, 3, 4, 5}}, {test::random_shape(rng, 3, 1, 4)}, {Shape{3, 2}}, {Shape{0, 3, 2}}};
  };
  OpCase c{.op = OpId::flatten,
           .build = [](const V& in) { return flatten(in[0]); },
           .ref = flat_ref(1),
           .shapes = shapes,
           .grad = true};
  OpCase from0 = c;
  from0.build = [](const V& in) { return flatten(in[0], 0); };
  from0.ref = flat_ref(0);
  OpCase from2 = c;
  from2.build = [](const V& in) { return flatten(in[0], 2); };
  from2.ref = flat_ref(2);
  from2.shapes = [](std::mt19937&) { return std::vector<ShapeSet>{{Shape{2, 3, 4, 5}}}; };
  from2.grad_max_numel = 120;
  return {c, from0, from2};
}

// ---- errors ----------------------------------------------------------------------------------

TEST(ConvErrors, Conv2d) {
  Tensor x = zeros({2, 4, 8, 8}), w = zeros({6, 4, 3, 3}), x3 = zeros({4, 8, 8});
  Tensor w_c3 = zeros({6, 3, 3, 3}), x_c6 = zeros({2, 6, 8, 8}), w_o4 = zeros({4, 2, 3, 3});
  Tensor w_tall = zeros({6, 4, 9, 3}), b5 = zeros({5}), w64 = zeros({6, 4, 3, 3}, DType::float64);
  Tensor xi = zeros({2, 4, 8, 8}, DType::int32), wi = zeros({6, 4, 3, 3}, DType::int32);
  Tensor dy5 = zeros({2, 6, 5, 5}), dy6 = zeros({2, 6, 6, 6});
  const uint64_t queued = Engine::get().stats().queued;
  EXPECT_TIDE_ERROR(conv2d(x3, w), "[conv2d]", "expected x (N, C, H, W)", "(4, 8, 8)",
                    "(6, 4, 3, 3)");
  EXPECT_TIDE_ERROR(conv2d(x, w_c3), "[conv2d]", "channel mismatch", "x has 4 channels",
                    "3 per group x 1 groups", "(2, 4, 8, 8)", "(6, 3, 3, 3)");
  EXPECT_TIDE_ERROR(conv2d(x, w, Tensor(), Conv2dOptions().groups(3)), "[conv2d]",
                    "groups = 3 does not divide the 4 input channels");
  EXPECT_TIDE_ERROR(conv2d(x_c6, w_o4, Tensor(), Conv2dOptions().groups(3)), "[conv2d]",
                    "groups = 3 does not divide the 4 output channels");
  EXPECT_TIDE_ERROR(conv2d(x, w_tall), "[conv2d]", "output would be empty", "(9, 3)", "(8, 8)");
  EXPECT_TIDE_ERROR(conv2d(x, w, Tensor(), Conv2dOptions().dilation(4)), "[conv2d]",
                    "output would be empty", "dilation (4, 4)");
  EXPECT_TIDE_ERROR(conv2d(x, w, Tensor(), Conv2dOptions().stride(0)), "[conv2d]",
                    "stride, dilation and groups >= 1", "stride (0, 0)");
  EXPECT_TIDE_ERROR(conv2d(x, w, Tensor(), Conv2dOptions().padding(-1)), "[conv2d]",
                    "padding >= 0");
  EXPECT_TIDE_ERROR(conv2d(x, w, b5), "[conv2d]", "bias (5,) float32", "(O) = (6)");
  EXPECT_TIDE_ERROR(conv2d(x, w64), "[conv2d]", "dtypes differ");
  EXPECT_TIDE_ERROR(conv2d(xi, wi), "[conv2d]", "floating");
  EXPECT_TIDE_ERROR(conv2d_input_grad(dy5, w, Shape{2, 4, 8, 8}), "[conv2d_input_grad]",
                    "dy (2, 6, 5, 5)", "(2, 6, 6, 6)");
  EXPECT_TIDE_ERROR(conv2d_weight_grad(dy6, x, Shape{6, 3, 3, 3}), "[conv2d_weight_grad]",
                    "channel mismatch");
  EXPECT_EQ(Engine::get().stats().queued, queued) << "nothing was queued";
}

TEST(ConvErrors, PoolingBatchNormFlatten) {
  Tensor x = zeros({2, 3, 4, 4});
  EXPECT_TIDE_ERROR(max_pool2d(zeros({3, 4, 4}), Pool2dOptions(2)), "[max_pool2d]",
                    "expected x (N, C, H, W)", "(3, 4, 4)");
  EXPECT_TIDE_ERROR(avg_pool2d(x, Pool2dOptions(5)), "[avg_pool2d]", "output would be empty",
                    "kernel (5, 5)");
  EXPECT_TIDE_ERROR(max_pool2d(x, Pool2dOptions(2).padding(2)), "[max_pool2d]",
                    "at most half the kernel", "padding (2, 2)");
  EXPECT_TIDE_ERROR(max_pool2d(x, Pool2dOptions(2).stride(0)), "[max_pool2d]", "stride >= 1");
  EXPECT_TIDE_ERROR(max_pool2d_grad(zeros({2, 3, 3, 3}), x, Pool2dOptions(2)), "[max_pool2d_grad]",
                    "dy (2, 3, 3, 3)", "(2, 3, 2, 2)");
  Tensor c3 = ones({3}), c4 = ones({4});
  EXPECT_TIDE_ERROR(batch_norm(x, c4, c3, Tensor(), Tensor(), true), "[batch_norm]",
                    "weight (4,) float32", "(C) = (3)", "(2, 3, 4, 4)");
  EXPECT_TIDE_ERROR(batch_norm(zeros({5}), c3, c3, Tensor(), Tensor(), true), "[batch_norm]",
                    "rank >= 2", "(5,)");
  EXPECT_TIDE_ERROR(batch_norm(x, c3, c3, Tensor(), Tensor(), false), "[batch_norm]", "eval mode",
                    "running_mean and running_var");
  EXPECT_TIDE_ERROR(batch_norm(x, c3, c3, zeros({3}), Tensor(), true), "[batch_norm]",
                    "both running_mean and running_var");
  EXPECT_TIDE_ERROR(batch_norm(zeros({1, 3}), c3, c3, Tensor(), Tensor(), true), "[batch_norm]",
                    "more than one value per channel", "(1, 3)");
  EXPECT_TIDE_ERROR(batch_norm(x, c3, c3, Tensor(), Tensor(), true, 1.5), "[batch_norm]",
                    "momentum 1.5");
  EXPECT_TIDE_ERROR(flatten(zeros({})), "[flatten]", "start_dim 1", "()");
  EXPECT_TIDE_ERROR(flatten(x, 4), "[flatten]", "start_dim 4", "(2, 3, 4, 4)");
}

// ---- traced replays, devices -----------------------------------------------------------------

// A conv block and its gradients traced with trace::function: every replay gives the eager
// bits, and the running estimates move the same way.
TEST(Conv, TracedBlockMatchesEagerBitwise) {
  Generator gen{7};
  const Tensor x = randn({4, 3, 10, 10}, DType::float32, gen);
  const Tensor w0 = randn({8, 3, 3, 3}, DType::float32, gen), b0 = randn({8}, DType::float32, gen);
  struct State {
    Tensor w, b, gamma, beta, rm, rv;
  };
  auto make = [&] {
    State s{clone(w0).requires_grad_(),
            clone(b0).requires_grad_(),
            ones({8}).requires_grad_(),
            zeros({8}).requires_grad_(),
            zeros({8}),
            ones({8})};
    return s;
  };
  auto step = [](State& s, const Tensor& in) {
    for (Tensor* t : {&s.w, &s.b, &s.gamma, &s.beta}) t->zero_grad();
    Tensor h = conv2d(in, s.w, s.b, Conv2dOptions().padding(1).stride(2));
    h = relu(batch_norm(h, s.gamma, s.beta, s.rm, s.rv, true));
    h = flatten(avg_pool2d(max_pool2d(h, Pool2dOptions(2)), Pool2dOptions(1)));
    Tensor loss = sum(mul(h, h));
    loss.backward();
    return loss;
  };
  State eager = make(), traced = make();
  auto f = trace::function([&](const Tensor& in) { return step(traced, in); }, {.name = "conv"});
  for (int i = 0; i < 3; ++i) {
    Tensor le = step(eager, x), lt = f(x);
    EXPECT_EQ(lt.to_vector<float>(), le.to_vector<float>()) << "call " << i;
    EXPECT_EQ(traced.w.grad().to_vector<float>(), eager.w.grad().to_vector<float>());
    EXPECT_EQ(traced.gamma.grad().to_vector<float>(), eager.gamma.grad().to_vector<float>());
    EXPECT_EQ(traced.rm.to_vector<float>(), eager.rm.to_vector<float>());
    EXPECT_EQ(traced.rv.to_vector<float>(), eager.rv.to_vector<float>());
  }
}

// deterministic_algorithms(false) (core/determinism.h) lets a GPU convolution take cuDNN's
// fastest algorithm: the results stay within float32 tolerance of the deterministic
// choice's on every device (the CPU's kernels are deterministic either way: the same bits),
// and the guard puts the setting back.
TEST(Conv, TheFastestAlgorithmsAgreeWithTheDeterministicOnes) {
  std::vector<Device> devices{Device::cpu()};
  for (Device d : test::case_devices())
    if (op_supported(d, OpId::conv2d)) devices.push_back(d);
  ASSERT_TRUE(deterministic_algorithms()) << "the default";
  for (Device d : devices) {
    Generator gen(3);
    Tensor x = randn({2, 3, 9, 9}, DType::float32, gen).to(d);
    Tensor w = randn({4, 3, 3, 3}, DType::float32, gen).to(d);
    auto run = [&] {
      Tensor xg = x.detach().requires_grad_(), wg = w.detach().requires_grad_();
      Tensor y = conv2d(xg, wg, Tensor(), Conv2dOptions().padding(1).stride(2));
      sum(y * y).backward();
      return std::vector<std::vector<float>>{y.to(Device::cpu()).to_vector<float>(),
                                             xg.grad().to(Device::cpu()).to_vector<float>(),
                                             wg.grad().to(Device::cpu()).to_vector<float>()};
    };
    const auto det = run();
    std::vector<std::vector<float>> fast;
    {
      DeterministicAlgorithmsGuard off(false);
      EXPECT_FALSE(deterministic_algorithms());
      fast = run();
    }
    EXPECT_TRUE(deterministic_algorithms()) << "the guard restores the setting";
    for (size_t k = 0; k < det.size(); ++k) {
      ASSERT_EQ(det[k].size(), fast[k].size());
      if (d.is_cpu()) EXPECT_EQ(det[k], fast[k]) << "output " << k;
      for (size_t i = 0; i < det[k].size(); ++i)
        ASSERT_NEAR(fast[k][i], det[k][i], 1e-4 * (1 + std::abs(det[k][i])))
            << d.str() << ", output " << k << ", element " << i;
    }
  }
}

// The split of batch norm's per-channel sums on a GPU (ops/channel_parts.h): the chunks
// cover each of a channel's m elements once, none is empty, none is small unless there is
// one, at most kMaxParts per channel, and they fill about kTargetBlocks blocks in all.
TEST(Conv, BatchNormChannelPartsCoverEachElementOnce) {
  using kernels::channel_parts;
  for (int64_t m : {int64_t(0), int64_t(1), int64_t(5), int64_t(2047), int64_t(2048), int64_t(2049),
                    int64_t(100000), int64_t(256) * 784, int64_t(1) << 30})
    for (int64_t c : {1, 3, 32, 64, 1000, 5000}) {
      SCOPED_TRACE(testing::Message() << "m " << m << ", c " << c);
      const kernels::ChannelParts p = channel_parts(m, c);
      ASSERT_GE(p.parts, 1);
      EXPECT_LE(p.parts, kernels::kMaxParts);
      if (m == 0) {
        EXPECT_EQ(p.chunk, 0);
        continue;
      }
      EXPECT_GE(p.parts * p.chunk, m) << "every element in a chunk";
      EXPECT_LT((p.parts - 1) * p.chunk, m) << "no empty chunk";
      if (p.parts > 1) EXPECT_GE(p.chunk, kernels::kMinChunk / 2);
      EXPECT_LE(p.parts * c, std::max(kernels::kTargetBlocks + c, c));
    }
  // A CNN's batch-norm layer (256 images of 28 x 28, 32 channels): 1024 blocks, not 32.
  EXPECT_EQ(channel_parts(256 * 784, 32).parts * 32, 1024);
  // A sum down three columns of 20000 (ops/cuda/reduce.cu): 79 chunks of 254 elements.
  const kernels::ChannelParts cols = kernels::column_parts(20000, 3);
  EXPECT_EQ(cols.parts, 79);
  EXPECT_GE(cols.parts * cols.chunk, 20000);
  EXPECT_LT((cols.parts - 1) * cols.chunk, 20000);
  EXPECT_EQ(kernels::column_parts(100, 3).parts, 1) << "short columns stay whole";
}

// On a real GPU: pooling and batch norm are tide's own kernels, always there; the three
// convolution ops are cuDNN's, registered together where the toolkit had cudnn.h, else each
// is refused before anything is queued. A device that does not exist has none of them.
// (The fake GPU of tide_ops_tests runs the CPU kernels, so the cases above ran there too;
// tide_cuda_tests runs them on a real GPU.)
TEST(Conv, CudaKernelsOnARealGpu) {
  const OpId convs[] = {OpId::conv2d, OpId::conv2d_input_grad, OpId::conv2d_weight_grad};
  const OpId own[] = {OpId::max_pool2d,      OpId::max_pool2d_grad, OpId::avg_pool2d,
                      OpId::avg_pool2d_grad, OpId::batch_norm,      OpId::batch_norm_grad};
  for (OpId id : convs) EXPECT_FALSE(op_supported(Device::cuda(7), id)) << op_name(id);
  for (OpId id : own) EXPECT_FALSE(op_supported(Device::cuda(7), id)) << op_name(id);
  if (!cuda::available(0) || cuda::runs_host_kernels(0)) GTEST_SKIP() << "no real GPU";
  for (OpId id : own) EXPECT_TRUE(op_supported(Device::cuda(0), id)) << op_name(id);
  const bool cudnn = op_supported(Device::cuda(0), OpId::conv2d);
  for (OpId id : convs) EXPECT_EQ(op_supported(Device::cuda(0), id), cudnn) << op_name(id);
  if (!cudnn)
    EXPECT_TIDE_ERROR(conv2d(zeros({1, 1, 3, 3}, DType::float32, Device::cuda(0)),
                             zeros({1, 1, 3, 3}, DType::float32, Device::cuda(0))),
                      "[conv2d]", "has no CUDA kernel");
}

}  // namespace
}  // namespace tide
