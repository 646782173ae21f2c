// The convolutional-network family's kernel entries (ops/kernel_entry.h): convolution and
// its two gradients, max / average pooling and their gradients, batch normalisation and
// its gradient. CPU implementations in ops/cpu/conv.cpp (convolutions) and
// ops/cpu/pool_norm.cpp (pooling, batch norm); CUDA ones in ops/cuda/conv.cu (convolutions,
// through cuDNN) and ops/cuda/pool_norm.cu.
#pragma once

#include <cstdint>

#include "core/kernel_context.h"
#include "core/storage.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

// The sizes of one conv2d: x (n, c, h, w), weight (o, c / groups, kh, kw), y (n, o, oh, ow).
// Every product the GEMMs take fits in int (the front-ends check).
struct ConvGeom {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t o = 0, kh = 0, kw = 0, oh = 0, ow = 0;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
};

// y = conv2d(x, weight) + bias (bias skipped when has_bias is false).
template <class T>
struct Conv2dForward {
  DataRef<T> x, weight, bias, y;
  ConvGeom g;
  bool has_bias = false;
};
// dx (n, c, h, w) from dy and weight.
template <class T>
struct Conv2dInputGrad {
  DataRef<T> dy, weight, dx;
  ConvGeom g;
};
// dweight (o, c / groups, kh, kw) from dy and x.
template <class T>
struct Conv2dWeightGrad {
  DataRef<T> dy, x, dweight;
  ConvGeom g;
};

// The sizes of one pooling: x (n, c, h, w) -> y (n, c, oh, ow), window kh x kw.
struct PoolGeom {
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
};
// Separate types for max and average pooling: an entry is registered per argument type.
template <class T>
struct MaxPool2d {
  DataRef<T> x, y;
  PoolGeom g;
};
template <class T>
struct AvgPool2d {
  DataRef<T> x, y;
  PoolGeom g;
};
// max_pool2d's gradient reads x to find each window's first maximum again.
template <class T>
struct MaxPool2dGrad {
  DataRef<T> dy, x, dx;
  PoolGeom g;
};
template <class T>
struct AvgPool2dGrad {
  DataRef<T> dy, dx;
  PoolGeom g;
};

// x viewed as (n, c, s). Writes y and stats (2 x c: mean, 1 / sqrt(var + eps)); in
// training the stats are the batch's and, when has_running, running_mean / running_var are
// updated with momentum (unbiased variance); otherwise the running estimates are read.
template <class T>
struct BatchNorm {
  DataRef<T> x, weight, bias, running_mean, running_var, y, stats;
  int64_t n = 0, c = 0, s = 0;
  bool training = true, has_running = false;
  double momentum = 0.1, eps = 1e-5;
};
// dx, dweight, dbias from dy, x, weight and the forward's stats.
template <class T>
struct BatchNormGrad {
  DataRef<T> dy, x, weight, stats, dx, dweight, dbias;
  int64_t n = 0, c = 0, s = 0;
  bool training = true;
};

namespace cpu {
template <class T>
void conv2d(const KernelContext&, const Conv2dForward<T>&, const NoExtra&);
template <class T>
void conv2d_input_grad(const KernelContext&, const Conv2dInputGrad<T>&, const NoExtra&);
template <class T>
void conv2d_weight_grad(const KernelContext&, const Conv2dWeightGrad<T>&, const NoExtra&);
template <class T>
void max_pool2d(const KernelContext&, const MaxPool2d<T>&, const NoExtra&);
template <class T>
void max_pool2d_grad(const KernelContext&, const MaxPool2dGrad<T>&, const NoExtra&);
template <class T>
void avg_pool2d(const KernelContext&, const AvgPool2d<T>&, const NoExtra&);
template <class T>
void avg_pool2d_grad(const KernelContext&, const AvgPool2dGrad<T>&, const NoExtra&);
template <class T>
void batch_norm(const KernelContext&, const BatchNorm<T>&, const NoExtra&);
template <class T>
void batch_norm_grad(const KernelContext&, const BatchNormGrad<T>&, const NoExtra&);
}  // namespace cpu

}  // namespace tide::kernels
