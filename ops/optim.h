// Fused optimizer updates: one queued op per parameter that does a whole SGD or Adam/AdamW
// update in one pass over the elements, and the queued step counter Adam's bias correction
// reads. The per-element math is fn::SgdUpdate / fn::AdamUpdate in ops/functors.h, shared
// with the CUDA path.
//
// Hyper-parameters that change between steps are read from tensors by the kernel when it
// runs, never at enqueue (docs/contributing.md, Values that change between replays): the learning
// rate (a one-element tensor of the parameter's dtype) and Adam's step count t (a one-element int64
// tensor). A traced or replayed step therefore sees the values written by earlier queued ops
// (set_lr's copy_, increment_). Hyper-parameters fixed for an optimizer's life (momentum, betas,
// eps, weight decay) are plain values in the options.
//
// Not done here: autograd (these ops are refused while recording a tensor that requires
// grad: run them under NoGrad), broadcasting (every state tensor has the parameter's
// shape) and mixed dtypes. Every operand must be on the parameter's device.
// Tensors are always contiguous in tide, so there is no stride check.
#pragma once

#include "core/engine/engine.h"
#include "core/options.h"
#include "core/tensor.h"

namespace tide {

// SGD with momentum, as PyTorch: g = grad + weight_decay * p; with momentum m,
// buf = m * buf + (1 - dampening) * g (buf = g on the first update), g = nesterov ?
// g + m * buf : buf; then p -= lr * g.
struct SgdUpdateOptions {
  TIDE_ARG(double, momentum) = 0;
  TIDE_ARG(double, dampening) = 0;
  TIDE_ARG(bool, nesterov) = false;
  TIDE_ARG(double, weight_decay) = 0;
  // The momentum buffer is fresh (e.g. Tensor::empty): the kernel sets it to g without
  // reading it. A non-tensor argument: a trace sees it change once, after the first step.
  TIDE_ARG(bool, fresh_state) = false;
};

// Adam (decoupled = false: g = grad + weight_decay * p) and AdamW (decoupled = true:
// p *= 1 - lr * weight_decay first), as PyTorch: m = b1 * m + (1 - b1) * g;
// v = b2 * v + (1 - b2) * g²; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
struct AdamUpdateOptions {
  AdamUpdateOptions& betas(double b1, double b2) {
    beta1_ = b1;
    beta2_ = b2;
    return *this;
  }
  double beta1_ = 0.9;
  double beta2_ = 0.999;
  TIDE_ARG(double, eps) = 1e-8;
  TIDE_ARG(double, weight_decay) = 0;
  TIDE_ARG(bool, decoupled) = false;
  // m and v are fresh (e.g. Tensor::empty): the kernel takes them as zero without reading.
  TIDE_ARG(bool, fresh_state) = false;
};

// Queues one fused SGD update of `param` from `grad`, writing param and (with momentum)
// momentum_buf in place; lr is read when the kernel runs. momentum_buf may be undefined
// when options.momentum_ == 0. Does not wait.
// Throws "[sgd_update_]" before queueing anything when: a tensor is undefined or not on the
// CPU; param is not float32/float64; grad or momentum_buf differ from param in shape,
// dtype or device; lr is not a one-element tensor of param's dtype on its device; a
// written tensor overlaps another operand; an option is negative (or Nesterov without
// momentum or with dampening); or a written tensor requires grad while grad mode is on.
void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const Tensor& lr,
                 const SgdUpdateOptions& options, Site site = Site::current());

// Queues one fused Adam/AdamW update of `param` from `grad`, writing param, m and v in
// place. lr and the step count t (>= 1, the number of this update, as left by increment_)
// are read when the kernel runs; a step below 1 fails the op there. Does not wait.
// Throws "[adam_update_]" before queueing anything when: a tensor is undefined or not on
// the CPU; param is not float32/float64; grad, m or v differ from param in shape, dtype or
// device; lr is not a one-element tensor of param's dtype, or step not a one-element int64
// tensor, on param's device; a written tensor overlaps another operand; beta1 or beta2 is
// outside [0, 1), eps or weight decay is negative; or a written tensor requires grad while
// grad mode is on.
void adam_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& lr,
                  const Tensor& step, const AdamUpdateOptions& options,
                  Site site = Site::current());

// Queues counter += 1 for a one-element int32/int64 counter (Adam's step tensor). Does not
// wait. Throws "[increment_]" for an undefined, non-CPU, non-integer or multi-element
// tensor, or one that requires grad.
void increment_(Tensor& counter, Site site = Site::current());

}  // namespace tide
