// Optimizers: SGD (momentum, Nesterov, weight decay), Adam and AdamW over a list of leaf
// parameters. Each step queues one fused in-place update per parameter that has a gradient
// (ops/optim.h: sgd_update_, adam_update_), plus, for Adam, one increment_ of the step
// counter; all under NoGrad, and a step never waits.
//
// Hyper-parameters that change between steps live in 0-d tensors that the kernels read
// when they run (docs/contributing.md, Values that change between replays): the learning rate
// (lr_tensor(), written by set_lr with a queued copy) and, for Adam, the step count t
// (step_tensor(), advanced by a queued increment_), so a traced step replays unchanged.
// Hyper-parameters fixed for the optimizer's life (momentum, betas, eps, weight decay) are plain
// scalars.
//
// State (momentum buffers, Adam's m and v) is allocated at a parameter's first update
// without a fill: that update tells the kernel the state is fresh (a non-tensor argument,
// so a trace of the first step differs from later ones).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"
#include "core/tensor.h"

namespace tide::train {

class Optimizer {
 public:
  // Throws "[<name>]" unless every parameter is a defined floating leaf that requires grad,
  // all share one dtype and device, and lr >= 0.
  Optimizer(std::vector<Tensor> params, double lr, std::string name);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Queues one update of every parameter that has a gradient; parameters without one are
  // skipped (their state is untouched). Does not wait.
  virtual void step() = 0;
  // Drops every parameter's gradient (the next backward starts from nothing).
  void zero_grad();

  // The learning rate the next step uses. set_lr queues a write into lr_tensor(), so it
  // takes effect at the next step(). Throws "[<name>]" for a negative or non-finite lr.
  void set_lr(double lr);
  double lr() const { return lr_host_; }
  // The 0-d tensor the updates read the learning rate from.
  const Tensor& lr_tensor() const { return lr_; }
  // Steps taken (host counter, for the caller; the kernels read Adam's step_tensor()).
  int64_t step_count() const { return steps_; }
  const std::vector<Tensor>& params() const { return params_; }
  const std::string& name() const { return name_; }

 protected:
  // A 0-d tensor of the parameters' dtype holding v (queued fill).
  Tensor scalar(double v) const;

  std::vector<Tensor> params_;
  std::string name_;
  Tensor lr_;
  double lr_host_ = 0;
  int64_t steps_ = 0;
};

struct SGDOptions {
  explicit SGDOptions(double lr) : lr_(lr) {}
  double lr_;
  TIDE_ARG(double, momentum) = 0;
  TIDE_ARG(double, dampening) = 0;
  TIDE_ARG(bool, nesterov) = false;
  TIDE_ARG(double, weight_decay) = 0;
};

// PyTorch's SGD: g += wd*p; buf = g on the first step, then buf = m*buf + (1-dampening)*g;
// g = nesterov ? g + m*buf : buf; p -= lr*g.
// Throws "[sgd]" for negative lr, momentum, dampening or weight decay, and for Nesterov
// without momentum or with dampening.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  void step() override;
  const SGDOptions& options() const { return opt_; }

 private:
  SGDOptions opt_;
  std::vector<Tensor> buf_;  // momentum buffers, created (unfilled) at a parameter's first
                             // update
};

struct AdamOptions {
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  AdamOptions& betas(double b1, double b2) {
    beta1_ = b1;
    beta2_ = b2;
    return *this;
  }
  double lr_;
  double beta1_ = 0.9;
  double beta2_ = 0.999;
  TIDE_ARG(double, eps) = 1e-8;
  TIDE_ARG(double, weight_decay) = 0;
};

// PyTorch's Adam (decoupled = false: g += wd*p) and AdamW (decoupled = true: p *= 1 - lr*wd
// first). m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g²;
// p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
// t counts the optimizer's steps, not a parameter's updates (unlike PyTorch, which counts
// per parameter): a parameter first updated at step 3 is bias-corrected with t = 3.
// Throws "[adam]"/"[adamw]" for negative lr, eps or weight decay, or betas outside [0, 1).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options);
  void step() override;
  const AdamOptions& options() const { return opt_; }
  // The step count t (0-d int64, 0 before the first step) the updates read; each step
  // queues its increment before the updates.
  const Tensor& step_tensor() const { return step_; }

 protected:
  Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled, const char* name);

 private:
  AdamOptions opt_;
  bool decoupled_;
  Tensor step_;
  std::vector<Tensor> m_, v_;  // created (unfilled) at a parameter's first update
};

class AdamW : public Adam {
 public:
  // Unlike PyTorch's AdamW (default 1e-2), the weight decay is AdamOptions' (default 0).
  AdamW(std::vector<Tensor> params, const AdamOptions& options)
      : Adam(std::move(params), options, true, "adamw") {}
};

}  // namespace tide::train
