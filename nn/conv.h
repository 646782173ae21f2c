// The layers of convolutional networks: Conv2d, MaxPool2d, AvgPool2d, BatchNorm2d and
// Flatten over NCHW inputs, on the ops of ops/conv.h. Parameter and buffer names and the
// weight layout are PyTorch's (weight (out, in / groups, KH, KW), bias, running_mean,
// running_var, num_batches_tracked), so a state_dict of the same architecture maps one to
// one (tide's Linear keeps its own (in, out) layout). Not here: padding modes other than
// zeros, BatchNorm2d without affine parameters or running estimates, ceil_mode pooling.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/options.h"
#include "nn/module.h"
#include "ops/conv.h"

namespace tide::nn {

// Conv2dOptions(in, out, kernel) with chainable setters: .stride(2).padding(1).bias(false).
struct Conv2dOptions {
  Conv2dOptions(int64_t in, int64_t out, int64_t kernel) : Conv2dOptions(in, out, kernel, kernel) {}
  Conv2dOptions(int64_t in, int64_t out, int64_t kh, int64_t kw)
      : in_channels(in), out_channels(out), kernel{kh, kw} {}
  Conv2dOptions& stride(int64_t s) {
    conv.stride(s);
    return *this;
  }
  Conv2dOptions& stride(int64_t h, int64_t w) {
    conv.stride(h, w);
    return *this;
  }
  Conv2dOptions& padding(int64_t p) {
    conv.padding(p);
    return *this;
  }
  Conv2dOptions& padding(int64_t h, int64_t w) {
    conv.padding(h, w);
    return *this;
  }
  Conv2dOptions& dilation(int64_t d) {
    conv.dilation(d);
    return *this;
  }
  Conv2dOptions& dilation(int64_t h, int64_t w) {
    conv.dilation(h, w);
    return *this;
  }
  Conv2dOptions& groups(int64_t g) {
    conv.groups(g);
    return *this;
  }
  int64_t in_channels, out_channels;
  std::array<int64_t, 2> kernel;
  tide::Conv2dOptions conv;  // stride, padding, dilation, groups
  TIDE_ARG_AS(bool, bias, with_bias) = true;
  TIDE_ARG_AS(DType, dtype, param_dtype) = DType::float32;
};

// y = conv2d(x, weight, bias). The weight (and the bias) start as PyTorch's defaults:
// U(-b, b) with b = 1 / sqrt(fan_in), fan_in = in / groups * KH * KW (kaiming_uniform_ with
// a = sqrt(5)).
class Conv2d : public Module {
 public:
  // Throws "[Conv2d]" for non-positive sizes or groups that do not divide both channel
  // counts.
  explicit Conv2d(const Conv2dOptions& opt, Generator& gen = default_generator());
  // Throws "[Conv2d]" unless x is (N, in_channels, H, W) of the parameters' dtype (conv2d
  // itself throws "[conv2d]" for an input smaller than the kernel).
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias
  const Conv2dOptions& options() const { return opt_; }

 private:
  Conv2dOptions opt_;
  Tensor weight_, bias_;
};

// max_pool2d with fixed options; no parameters.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const Pool2dOptions& opt) : opt_(opt) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, opt_); }
  std::string name() const override { return "MaxPool2d"; }

 private:
  Pool2dOptions opt_;
};

// avg_pool2d (padding counted, as PyTorch's default) with fixed options; no parameters.
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const Pool2dOptions& opt) : opt_(opt) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, opt_); }
  std::string name() const override { return "AvgPool2d"; }

 private:
  Pool2dOptions opt_;
};

struct BatchNorm2dOptions {
  explicit BatchNorm2dOptions(int64_t features) : num_features(features) {}
  int64_t num_features;
  TIDE_ARG_AS(double, eps, epsilon) = 1e-5;
  TIDE_ARG(double, momentum) = 0.1;
  TIDE_ARG_AS(DType, dtype, param_dtype) = DType::float32;
};

// batch_norm per channel of (N, C, H, W) inputs. Parameters weight (ones) and bias
// (zeros); buffers running_mean (zeros), running_var (ones) and num_batches_tracked (a 0-d
// int64 counter). In training mode it normalises with the batch's statistics and updates
// the running estimates and the counter (queued, in place); in eval mode it normalises
// with the running estimates.
class BatchNorm2d : public Module {
 public:
  // Throws "[BatchNorm2d]" for num_features < 1, eps <= 0 or momentum outside [0, 1].
  explicit BatchNorm2d(const BatchNorm2dOptions& opt);
  explicit BatchNorm2d(int64_t features) : BatchNorm2d(BatchNorm2dOptions(features)) {}
  // Throws "[BatchNorm2d]" unless x is (N, num_features, H, W) of the parameters' dtype.
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BatchNorm2d"; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  const Tensor& num_batches_tracked() const { return num_batches_; }

 private:
  BatchNorm2dOptions opt_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_;
};

// flatten(x, start_dim): a view, no parameters.
class Flatten : public Module {
 public:
  explicit Flatten(int start_dim = 1) : start_dim_(start_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_dim_); }
  std::string name() const override { return "Flatten"; }

 private:
  int start_dim_;
};

}  // namespace tide::nn
