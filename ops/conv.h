// The convolutional-network family: 2-D convolution (NCHW), max and average pooling, batch
// normalisation and flatten, with their gradients (first order: the gradient ops below
// record no gradient of their own). CPU kernels in ops/cpu/conv.cpp (im2col + CBLAS GEMM)
// and ops/cpu/pool_norm.cpp;
// on a GPU the convolutions run through cuDNN (ops/cuda/conv.cu), pooling and batch norm
// through tide's own kernels (ops/cuda/pool_norm.cu). All queued; none waits.
#pragma once

#include <array>
#include <cstdint>

#include "core/engine/engine.h"
#include "core/tensor.h"

namespace tide {

// Options of conv2d with chainable setters: Conv2dOptions().stride(2).padding(1).
// Each spatial setter takes one value for both dimensions or (height, width).
struct Conv2dOptions {
  Conv2dOptions& stride(int64_t s) { return stride(s, s); }
  Conv2dOptions& stride(int64_t h, int64_t w) {
    strides = {h, w};
    return *this;
  }
  Conv2dOptions& padding(int64_t p) { return padding(p, p); }
  Conv2dOptions& padding(int64_t h, int64_t w) {
    pads = {h, w};
    return *this;
  }
  Conv2dOptions& dilation(int64_t d) { return dilation(d, d); }
  Conv2dOptions& dilation(int64_t h, int64_t w) {
    dilations = {h, w};
    return *this;
  }
  Conv2dOptions& groups(int64_t g) {
    group_count = g;
    return *this;
  }
  std::array<int64_t, 2> strides{1, 1};
  std::array<int64_t, 2> pads{0, 0};  // zeros on each side
  std::array<int64_t, 2> dilations{1, 1};
  int64_t group_count = 1;
};

// Options of max_pool2d and avg_pool2d: the window, its stride (default: the window, as
// PyTorch) and implicit padding on each side (at most half the window).
struct Pool2dOptions {
  explicit Pool2dOptions(int64_t k) : Pool2dOptions(k, k) {}
  Pool2dOptions(int64_t kh, int64_t kw) : kernel{kh, kw}, strides{kh, kw} {}
  Pool2dOptions& stride(int64_t s) { return stride(s, s); }
  Pool2dOptions& stride(int64_t h, int64_t w) {
    strides = {h, w};
    return *this;
  }
  Pool2dOptions& padding(int64_t p) { return padding(p, p); }
  Pool2dOptions& padding(int64_t h, int64_t w) {
    pads = {h, w};
    return *this;
  }
  std::array<int64_t, 2> kernel;
  std::array<int64_t, 2> strides;
  std::array<int64_t, 2> pads{0, 0};
};

// y[n, o] = bias[o] + sum over the input channels c of o's group and the window of
// w[o, c, i, j] * x[n, c, oh*s + i*d - p, ow*s + j*d - p] (zero outside x): PyTorch's
// conv2d. x (N, C, H, W), w (O, C / groups, KH, KW), bias (O) or undefined (no bias); all
// of one floating dtype on one device (bfloat16 and float16: on the CPU one kernel computing
// in float32, rounding once; elsewhere the float32 path between casts). Output (N, O, OH, OW) with
// OH = (H + 2 * pad - dilation * (KH - 1) - 1) / stride + 1 (the same for W).
// Differentiable in x, w and bias. Throws "[conv2d]" naming the shapes and the options for
// ranks other than 4, a channel count that differs from w's times groups, groups that do
// not divide C and O, non-positive stride, dilation or groups, negative padding, an output
// extent below 1, or sizes past BLAS's 32-bit limit.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(),
              const Conv2dOptions& opt = {}, Site site = Site::current());
// The gradient of conv2d with respect to x: dx (input_shape) from dy (N, O, OH, OW) and w;
// the transposed convolution (col2im of w^T @ dy). Not differentiable. Throws
// "[conv2d_input_grad]" when the shapes do not fit conv2d's rule for `opt`.
Tensor conv2d_input_grad(const Tensor& dy, const Tensor& w, const Shape& input_shape,
                         const Conv2dOptions& opt = {}, Site site = Site::current());
// The gradient of conv2d with respect to w: dw (weight_shape) = sum over the batch of
// dy @ im2col(x)^T per group. Not differentiable. Throws "[conv2d_weight_grad]" when the
// shapes do not fit conv2d's rule for `opt`.
Tensor conv2d_weight_grad(const Tensor& dy, const Tensor& x, const Shape& weight_shape,
                          const Conv2dOptions& opt = {}, Site site = Site::current());

// The maximum of each window of each (n, c) plane of x (N, C, H, W); padding counts as
// -infinity. Output (N, C, OH, OW), OH = (H + 2 * pad - KH) / stride + 1. Differentiable:
// the gradient goes to each window's first maximum (row-major order). float32 or float64.
// Throws "[max_pool2d]" for a rank other than 4, a non-positive window or stride, padding
// that is negative or over half the window, or an output extent below 1.
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt, Site site = Site::current());
// The gradient of max_pool2d: dx (x's shape) with each dy element added at its window's
// first maximum in x. Not differentiable. Throws "[max_pool2d_grad]" on shapes that do not
// fit max_pool2d's rule.
Tensor max_pool2d_grad(const Tensor& dy, const Tensor& x, const Pool2dOptions& opt,
                       Site site = Site::current());
// The mean of each window, padding included in the count (PyTorch's default
// count_include_pad=True: every window divides by KH * KW). Shape rule, dtypes and errors
// ("[avg_pool2d]") as max_pool2d. Differentiable.
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt, Site site = Site::current());
// The gradient of avg_pool2d: each dy element spread evenly (1 / (KH * KW)) over its
// window, within x (input_shape). Not differentiable. Throws "[avg_pool2d_grad]".
Tensor avg_pool2d_grad(const Tensor& dy, const Shape& input_shape, const Pool2dOptions& opt,
                       Site site = Site::current());

// Batch normalisation over every dimension but 1 (the channels) of x (N, C, ...):
// y = (x - mean_c) / sqrt(var_c + eps) * weight_c + bias_c. In training, mean and var are
// the batch's (biased variance), and when running_mean / running_var are given they are
// updated in place, as PyTorch does: r = (1 - momentum) * r + momentum * batch value, with
// the unbiased variance for running_var. Not training: the running estimates normalise
// (both required). weight, bias, running_mean, running_var: (C), x's dtype and device.
// Differentiable in x, weight and bias (in eval mode the statistics are constants).
// Throws "[batch_norm]" naming the shapes for rank < 2, parameters not of shape (C), a
// training batch with one value per channel, running estimates missing in eval mode, or
// momentum outside [0, 1] / eps <= 0.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum = 0.1, double eps = 1e-5, Site site = Site::current());

// The three gradients of batch_norm, computed in one pass.
struct BatchNormGrads {
  Tensor x, weight, bias;
};
// From dy (x's shape), x, weight and the statistics the forward normalised with
// (`stats` (2, C): row 0 the mean, row 1 1 / sqrt(var + eps)); `training` says whether
// they were the batch's (then dx includes the terms through the mean and the variance).
// Not differentiable. Throws "[batch_norm_grad]" on mismatched shapes.
BatchNormGrads batch_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& weight,
                               const Tensor& stats, bool training, Site site = Site::current());
// x reshaped to (x.size(0), ..., product of the extents from start_dim on): a view that
// shares x's storage (no kernel). Differentiable. Throws "[flatten]" for a 0-d x or
// start_dim outside [0, rank).
Tensor flatten(const Tensor& x, int start_dim = 1);

}  // namespace tide
