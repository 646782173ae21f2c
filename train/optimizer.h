// Optimizers: SGD (momentum, Nesterov, weight decay), Adam and AdamW over a list of leaf
// parameters, or over parameter groups with their own weight decay. bfloat16 / float16
// parameters are updated through float32 master copies with float32 state (DESIGN §12). Each step
// queues one fused in-place update per parameter that has a gradient (ops/optim.h: sgd_update_,
// adam_update_), plus, for Adam, one increment_ of the step counter; all under NoGrad, and a
// step never waits.
//
// Hyper-parameters that change between steps live in 0-d tensors that the kernels read
// when they run (docs/contributing.md, Values that change between replays): the learning rate
// (lr_tensor(), written by set_lr with a queued copy, or by a schedule: train/schedule.h), the
// step count t (step_tensor(), advanced by a queued increment_) and a gradient clip's scale
// (clip_grad_norm), so a traced step replays unchanged. Hyper-parameters fixed for the
// optimizer's life (momentum, betas, eps, weight decay per group) are plain scalars.
//
// State (momentum buffers, Adam's m and v) is allocated at a parameter's first update
// without a fill: that update tells the kernel the state is fresh (a non-tensor argument,
// so a trace of the first step differs from later ones).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "core/options.h"
#include "core/tensor.h"

namespace tide::nn {
class Module;
}

namespace tide::train {

// Parameters that share a weight decay (nanoGPT decays matmul weights and embeddings, not
// biases and norm weights: decay_groups below).
struct ParamGroup {
  std::vector<Tensor> params;
  // Unset: the optimizer options' weight decay.
  std::optional<double> weight_decay;
};

// nanoGPT's split of module.named_parameters() (in that order): parameters with dim >= 2
// decay by weight_decay, the others (biases, norm weights) not at all; {decay, no_decay},
// either possibly empty. A parameter named twice (a submodule used in two places) is listed
// once. Throws "[decay_groups]" for a weight_decay that is negative or not finite.
std::vector<ParamGroup> decay_groups(const nn::Module& module, double weight_decay);

class Optimizer {
 public:
  // Throws "[<name>]" unless every parameter is a defined floating leaf that requires grad,
  // all share one dtype and device, and lr >= 0.
  Optimizer(std::vector<Tensor> params, double lr, std::string name);
  // The same over groups (params() lists them in order). Throws "[<name>]" as above, when
  // the groups hold no parameter at all, when a parameter is in two groups, and for a
  // group's weight decay that is negative or not finite. (A parameter twice in one group,
  // or in one list, is not refused and is updated twice, as before groups.)
  Optimizer(std::vector<ParamGroup> groups, double lr, std::string name);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Queues one update of every parameter that has a gradient; parameters without one are
  // skipped (their state is untouched). Does not wait.
  virtual void step() = 0;
  // Drops every parameter's gradient (the next backward starts from nothing) and a pending
  // clip_grad_norm scale.
  void zero_grad();

  // The learning rate the next step uses. set_lr queues a write into lr_tensor(), so it
  // takes effect at the next step(). Throws "[<name>]" for a negative or non-finite lr.
  void set_lr(double lr);
  // The value given to the constructor or the last set_lr (a schedule writes lr_tensor() on
  // the device and does not change it: WarmupCosine::lr_at gives its value on the host).
  double lr() const { return lr_host_; }
  // The 0-d tensor the updates read the learning rate from.
  const Tensor& lr_tensor() const { return lr_; }
  // Steps taken (host counter, for the caller; the kernels read step_tensor()). A replayed
  // traced step does not run the C++ of step() and so does not advance it.
  int64_t step_count() const { return steps_; }
  // The steps taken as a 0-d int64 tensor on the parameters' device, advanced by a queued
  // increment_ at the start of each step() (before the updates), for ops that read it when
  // they run: Adam's bias correction, a learning-rate schedule. Adam keeps one from its
  // construction. SGD makes one at the first call (holding step_count(), a queued fill) and
  // from then on each of its steps queues the increment: call it before tracing a step.
  // Does not wait.
  const Tensor& step_tensor();
  const std::vector<Tensor>& params() const { return params_; }
  // The groups as given (one group, weight decay unset, for the constructor from a list).
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  const std::string& name() const { return name_; }

  // Gradient clipping fused into the next step: queues the L2 norm of all of params()'
  // gradients (train/clip.h: grad_norm) and its scale min(1, max_norm / (norm + 1e-6)),
  // which the next step()'s updates multiply each gradient by when they run. The same
  // parameters as PyTorch's clip_grad_norm_ followed by step(), bit for bit, but the
  // gradients themselves are left as they are (p.grad() stays unclipped) and there is no
  // pass over them to rewrite them. Applies to the next step() only; zero_grad() drops it.
  // Returns the norm (0-d, the parameters' dtype and device; reading it waits). Does not
  // wait; nothing is read on the host, so it traces (call it inside the traced step).
  // Throws "[<name>]" for a max_norm that is not > 0.
  Tensor clip_grad_norm(double max_norm);

  // Loss scaling (train/grad_scaler.h): the next step() multiplies every gradient by
  // `scale` (a 0-d tensor, read when the updates run; with a pending clip the two multiply)
  // and skips all its updates, leaving parameters, state and step_tensor() as they were,
  // when the product is not finite. Once called, new optimizer state starts at zero instead
  // of unset, so a skipped first update leaves nothing unset (SGD's first momentum step then
  // uses (1 - dampening) * g where PyTorch uses g; the same when dampening is 0). Queues
  // only; does not wait. Throws "[<name>]" for a scale that is not a 0-d floating tensor on
  // the parameters' device.
  void scale_next_step(const Tensor& scale);

  // The dtype of the learning rate, the state and the updates: float32 for 16-bit
  // parameters (kept as float32 master copies: master()), the parameters' dtype otherwise.
  DType state_dtype() const;
  // Parameter i's float32 master copy (16-bit parameters, from their first update on), or
  // an undefined tensor. Each update changes the master and then rounds it into the
  // parameter (a queued cast and copy).
  const Tensor& master(size_t i) const { return masters_[i]; }

 protected:
  // A 0-d tensor of the parameters' dtype holding v (queued fill).
  Tensor scalar(double v) const;
  // Parameter i's group weight decay, or `fallback` (the options') when its group has none.
  double weight_decay_of(size_t i, double fallback) const;
  // The scale of a pending clip_grad_norm / scale_next_step, in state_dtype(), handed over
  // to this step (undefined: none).
  Tensor take_grad_scale();
  // Queues step_ += 1, or, when `scale` may skip this step, += 1 only if it is finite.
  void advance_step(const Tensor& scale);
  // What parameter i's update writes: its master copy (made at the first call) for a 16-bit
  // parameter, the parameter otherwise; and a gradient in that tensor's dtype (state_dtype()).
  Tensor& update_target(size_t i);
  Tensor update_grad(const Tensor& g) const;
  // After the update of a 16-bit parameter's master: rounds it into the parameter (queued).
  void write_back(size_t i);
  // New optimizer state for parameter i: unset (the update's fresh_state), or zeros after
  // scale_next_step (fresh_state then false). Sets `fresh` accordingly.
  Tensor new_state(size_t i, const char* tag, bool& fresh) const;

  std::vector<ParamGroup> groups_;
  std::vector<size_t> group_of_;  // per parameter of params_
  std::vector<Tensor> params_;
  std::string name_;
  Tensor lr_;
  Tensor step_;  // Adam: from construction; SGD: once step_tensor() made it
  Tensor grad_scale_;
  std::vector<Tensor> masters_;  // float32 copies of 16-bit parameters
  bool may_skip_ = false;        // a pending scale may be non-finite (scale_next_step)
  bool zero_state_ = false;      // scale_next_step was called: new state starts at zero
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
  // Over groups; a group without a weight decay takes options.weight_decay_. Also throws as
  // Optimizer's group constructor.
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options);
  // Braced groups; also settles SGD({}, options) (an empty list), which would otherwise be
  // ambiguous between the two constructors above.
  SGD(std::initializer_list<ParamGroup> groups, const SGDOptions& options)
      : SGD(std::vector<ParamGroup>(groups), options) {}
  void step() override;
  const SGDOptions& options() const { return opt_; }

 private:
  void check_options();

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
  // Over groups; a group without a weight decay takes options.weight_decay_. Also throws as
  // Optimizer's group constructor.
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options);
  // Braced groups; also settles Adam({}, options), as SGD's.
  Adam(std::initializer_list<ParamGroup> groups, const AdamOptions& options)
      : Adam(std::vector<ParamGroup>(groups), options) {}
  void step() override;
  const AdamOptions& options() const { return opt_; }
  // The step count t (0-d int64, 0 before the first step) the updates read; each step
  // queues its increment before the updates.
  const Tensor& step_tensor() const { return step_; }

 protected:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled,
       const char* name);

 private:
  AdamOptions opt_;
  bool decoupled_;
  std::vector<Tensor> m_, v_;  // created (unfilled) at a parameter's first update
};

class AdamW : public Adam {
 public:
  // Unlike PyTorch's AdamW (default 1e-2), the weight decay is AdamOptions' (default 0).
  AdamW(std::vector<Tensor> params, const AdamOptions& options)
      : Adam({ParamGroup{std::move(params), std::nullopt}}, options, true, "adamw") {}
  // Over groups, as Adam's (nanoGPT: AdamW(decay_groups(model, 0.1), options)).
  AdamW(std::vector<ParamGroup> groups, const AdamOptions& options)
      : Adam(std::move(groups), options, true, "adamw") {}
  AdamW(std::initializer_list<ParamGroup> groups, const AdamOptions& options)
      : AdamW(std::vector<ParamGroup>(groups), options) {}
};

}  // namespace tide::train
