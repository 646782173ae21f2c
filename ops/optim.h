// Fused optimizer updates: one queued op per parameter that does a whole SGD or Adam/AdamW
// update in one pass over the elements, the queued step counter Adam's bias correction
// reads, and a learning-rate schedule computed from that counter on the device. The
// per-element math is fn::SgdUpdate / fn::AdamUpdate / fn::WarmupCosine in ops/functors.h,
// shared with the CUDA path.
//
// Hyper-parameters that change between steps are read from tensors by the kernel when it
// runs, never at enqueue (docs/contributing.md, Values that change between replays): the learning
// rate (a one-element tensor of the parameter's dtype), the optional grad scale (the same) and
// Adam's step count t (a one-element int64 tensor). A traced or replayed step therefore sees the
// values written by earlier queued ops (set_lr's copy_, increment_, warmup_cosine_lr_, a clip's
// scale). Hyper-parameters fixed for an optimizer's life (momentum, betas, eps, weight decay) are
// plain values in the options.
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
// The same with the gradient multiplied by grad_scale first (read when the kernel runs;
// undefined: no scaling), as if grad.mul_(grad_scale) had been queued before: gradient
// clipping without a pass over the gradients (train::Optimizer::clip_grad_norm). Throws as
// above, and "[sgd_update_]" when a defined grad_scale is not a one-element tensor of param's
// dtype on its device, or overlaps a written tensor. Does not wait.
void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const Tensor& lr,
                 const Tensor& grad_scale, const SgdUpdateOptions& options,
                 Site site = Site::current());

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
// The same with the gradient multiplied by grad_scale first, as sgd_update_'s overload
// (undefined: no scaling). Throws as above, and "[adam_update_]" for a grad_scale that is not
// a one-element tensor of param's dtype on its device or overlaps a written tensor. Does not
// wait.
void adam_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& lr,
                  const Tensor& step, const Tensor& grad_scale, const AdamUpdateOptions& options,
                  Site site = Site::current());

// Queues counter += 1 for a one-element int32/int64 counter (Adam's step tensor). Does not
// wait. Throws "[increment_]" for an undefined, non-CPU, non-integer or multi-element
// tensor, or one that requires grad.
void increment_(Tensor& counter, Site site = Site::current());

// nanoGPT's learning-rate schedule (fn::WarmupCosine): at iteration it (0 for the first
// step), lr * (it + 1) / (warmup + 1) while it < warmup, then a cosine from lr down to
// min_lr, reached at it = decay_steps and kept after.
struct WarmupCosineOptions {
  TIDE_ARG(double, lr) = 0;      // the peak, reached at the end of the warmup
  TIDE_ARG(double, min_lr) = 0;  // from decay_steps on
  TIDE_ARG(int64_t, warmup) = 0;
  TIDE_ARG(int64_t, decay_steps) = 0;

  // Throws "[warmup_cosine_lr_]" unless 0 <= min_lr <= lr (finite) and
  // 0 <= warmup <= decay_steps.
  void check() const;
};

// Queues lr = schedule(step) for a one-element int64 step (an optimizer's step count, read
// when the kernel runs) into the one-element float32/float64 tensor lr; computed in double,
// then rounded to lr's dtype. A negative step counts as 0. Does not wait.
// Throws "[warmup_cosine_lr_]" before queueing anything for an undefined or non-floating lr,
// one on a device without this op's kernel, a step that is not one int64 element on lr's
// device, lr and step sharing memory, a written lr that requires grad while grad mode is
// on, or options other than 0 <= min_lr <= lr (finite) and 0 <= warmup <= decay_steps.
void warmup_cosine_lr_(Tensor& lr, const Tensor& step, const WarmupCosineOptions& options,
                       Site site = Site::current());

}  // namespace tide
