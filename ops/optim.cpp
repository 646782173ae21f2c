// Fused optimizer updates and the learning-rate schedule (see optim.h): argument checks,
// then one queued kernel entry per parameter (ops/optim_kernels.h) that applies
// fn::SgdUpdate / fn::AdamUpdate over the elements, or one that writes fn::WarmupCosine's lr.
// The kernels read lr, the grad scale and the step count from their tensors when they run.
#include "ops/optim.h"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/engine/failure.h"
#include "ops/autograd.h"
#include "ops/functors.h"
#include "ops/kernel_entry.h"
#include "ops/op_util.h"
#include "ops/optim_kernels.h"

namespace tide {

using namespace detail;

namespace {

// ---- checks (all before anything is queued) ---------------------------------------------

void check_operand(const Tensor& t, const char* what, OpId id) {
  TIDE_CHECK(t.defined(), op_name(id), what, " is an undefined tensor");
  check_supported(t, id);
}

void check_param(const Tensor& p, OpId id) {
  const char* op = op_name(id);
  check_operand(p, "param", id);
  TIDE_CHECK(is_floating(p.dtype()), op, "param must be float32 or float64, got ", describe(p));
}

// `t` must match the parameter in shape, dtype and device (grad and state tensors).
void check_like(const Tensor& t, const char* what, const Tensor& p, OpId id) {
  const char* op = op_name(id);
  check_operand(t, what, id);
  TIDE_CHECK(t.shape() == p.shape() && t.dtype() == p.dtype() && t.device() == p.device(), op, what,
             " ", describe(t), " on ", t.device().str(), " differs from param ", describe(p),
             " on ", p.device().str(), " (expected the parameter's shape, dtype and device)");
}

// A one-element hyper-parameter tensor (lr: the parameter's dtype; step: int64).
void check_scalar(const Tensor& t, const char* what, DType dtype, const Tensor& p, OpId id) {
  const char* op = op_name(id);
  check_operand(t, what, id);
  TIDE_CHECK(t.numel() == 1 && t.dtype() == dtype && t.device() == p.device(), op, what,
             " must be a one-element ", name(dtype), " tensor on ", p.device().str(), ", got ",
             describe(t), " on ", t.device().str());
}

void check_writable(const Tensor& t, const char* what, const char* op) {
  TIDE_CHECK(!(t.requires_grad() && autograd::grad_enabled()), op, "cannot update ", what, " ",
             describe(t),
             " in place: it requires grad and grad mode is on; use NoGrad (as "
             "optimizers do)");
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage() || a.numel() == 0 || b.numel() == 0) return false;
  int64_t a0 = a.offset() * int64_t(size_of(a.dtype())), a1 = a0 + int64_t(a.nbytes());
  int64_t b0 = b.offset() * int64_t(size_of(b.dtype())), b1 = b0 + int64_t(b.nbytes());
  return a0 < b1 && b0 < a1;
}

struct Operand {
  const Tensor& t;
  const char* what;
  bool written;
};

// A written tensor sharing memory with another operand would read elements already
// updated (or update them twice): refuse. Pairs are checked by position, so the same
// handle passed twice is caught too. Undefined operands (an absent grad scale) are skipped.
void check_no_overlap(std::initializer_list<Operand> all, const char* op) {
  for (auto a = all.begin(); a != all.end(); ++a)
    for (auto b = a + 1; b != all.end(); ++b) {
      if (!a->written && !b->written) continue;
      if (!a->t.defined() || !b->t.defined()) continue;
      const Operand& w = a->written ? *a : *b;
      const Operand& o = a->written ? *b : *a;
      TIDE_CHECK(!overlaps(w.t, o.t), op, w.what, " ", describe(w.t),
                 " is written in place but shares memory with ", o.what, " ", describe(o.t),
                 " (expected separate tensors; clone() one of them)");
    }
}

// An optional grad scale: undefined, or one element of the parameter's dtype.
void check_grad_scale(const Tensor& scale, const Tensor& p, OpId id) {
  if (scale.defined()) check_scalar(scale, "grad_scale", p.dtype(), p, id);
}

}  // namespace

// ---- front-ends -------------------------------------------------------------------------------

void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const Tensor& lr,
                 const SgdUpdateOptions& o, Site site) {
  sgd_update_(param, grad, momentum_buf, lr, Tensor(), o, site);
}

void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const Tensor& lr,
                 const Tensor& grad_scale, const SgdUpdateOptions& o, Site site) {
  const OpId id = OpId::sgd_update_;
  const char* op = op_name(id);
  check_param(param, id);
  check_like(grad, "grad", param, id);
  check_scalar(lr, "lr", param.dtype(), param, id);
  check_grad_scale(grad_scale, param, id);
  TIDE_CHECK(o.momentum_ >= 0 && o.dampening_ >= 0 && o.weight_decay_ >= 0, op,
             "invalid options: momentum ", o.momentum_, ", dampening ", o.dampening_,
             ", weight decay ", o.weight_decay_, " (expected each >= 0)");
  TIDE_CHECK(!o.nesterov_ || (o.momentum_ > 0 && o.dampening_ == 0), op,
             "Nesterov momentum requires a momentum > 0 and zero dampening (momentum ", o.momentum_,
             ", dampening ", o.dampening_, ")");
  const bool with_buf = o.momentum_ != 0;
  check_writable(param, "param", op);
  if (with_buf) {
    check_like(momentum_buf, "momentum_buf", param, id);
    check_writable(momentum_buf, "momentum_buf", op);
    check_no_overlap({{param, "param", true},
                      {grad, "grad", false},
                      {momentum_buf, "momentum_buf", true},
                      {lr, "lr", false},
                      {grad_scale, "grad_scale", false}},
                     op);
  } else {
    check_no_overlap({{param, "param", true},
                      {grad, "grad", false},
                      {lr, "lr", false},
                      {grad_scale, "grad_scale", false}},
                     op);
  }
  const bool scaled = grad_scale.defined();
  fn::SgdUpdate f{o.momentum_, o.dampening_, o.weight_decay_, o.nesterov_, o.fresh_state_};
  dispatch_floating(param.dtype(), [&](auto z) {
    using T = decltype(z);
    const kernels::Sgd<T> args{param.ref<T>(),
                               grad.ref<T>(),
                               with_buf ? momentum_buf.ref<T>() : DataRef<T>{},
                               lr.ref<T>(),
                               scaled ? grad_scale.ref<T>() : DataRef<T>{},
                               param.numel()};
    Storage *p = param.storage(), *g = grad.storage(), *l = lr.storage();
    if (with_buf && scaled)
      kernels::queue(id, param.device(), {p, g, momentum_buf.storage(), l, grad_scale.storage()},
                     {p, momentum_buf.storage()}, &kernels::cpu::sgd<T>, args, f, site);
    else if (with_buf)
      kernels::queue(id, param.device(), {p, g, momentum_buf.storage(), l},
                     {p, momentum_buf.storage()}, &kernels::cpu::sgd<T>, args, f, site);
    else if (scaled)
      kernels::queue(id, param.device(), {p, g, l, grad_scale.storage()}, {p},
                     &kernels::cpu::sgd<T>, args, f, site);
    else kernels::queue(id, param.device(), {p, g, l}, {p}, &kernels::cpu::sgd<T>, args, f, site);
  });
}

void adam_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& lr,
                  const Tensor& step, const AdamUpdateOptions& o, Site site) {
  adam_update_(param, grad, m, v, lr, step, Tensor(), o, site);
}

void adam_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& lr,
                  const Tensor& step, const Tensor& grad_scale, const AdamUpdateOptions& o,
                  Site site) {
  const OpId id = OpId::adam_update_;
  const char* op = op_name(id);
  check_param(param, id);
  check_like(grad, "grad", param, id);
  check_like(m, "m", param, id);
  check_like(v, "v", param, id);
  check_scalar(lr, "lr", param.dtype(), param, id);
  check_scalar(step, "step", DType::int64, param, id);
  check_grad_scale(grad_scale, param, id);
  TIDE_CHECK(o.beta1_ >= 0 && o.beta1_ < 1 && o.beta2_ >= 0 && o.beta2_ < 1, op, "invalid betas (",
             o.beta1_, ", ", o.beta2_, ") (expected each in [0, 1))");
  TIDE_CHECK(o.eps_ >= 0 && o.weight_decay_ >= 0, op, "invalid eps ", o.eps_, " or weight decay ",
             o.weight_decay_, " (expected each >= 0)");
  check_writable(param, "param", op);
  check_writable(m, "m", op);
  check_writable(v, "v", op);
  check_no_overlap({{param, "param", true},
                    {grad, "grad", false},
                    {m, "m", true},
                    {v, "v", true},
                    {lr, "lr", false},
                    {step, "step", false},
                    {grad_scale, "grad_scale", false}},
                   op);
  const bool scaled = grad_scale.defined();
  fn::AdamUpdate f{o.beta1_, o.beta2_, o.eps_, o.weight_decay_, o.decoupled_, o.fresh_state_};
  dispatch_floating(param.dtype(), [&](auto z) {
    using T = decltype(z);
    const kernels::Adam<T> args{param.ref<T>(),      grad.ref<T>(),
                                m.ref<T>(),          v.ref<T>(),
                                lr.ref<T>(),         scaled ? grad_scale.ref<T>() : DataRef<T>{},
                                step.ref<int64_t>(), param.numel()};
    // Reads: p, grad, lr, step (and the scale); m and v are in the writes only (reads +
    // writes must fit the task record's eight storages; the kernel refuses failed m and v
    // itself).
    Storage *p = param.storage(), *g = grad.storage(), *l = lr.storage(), *t = step.storage();
    if (scaled)
      kernels::queue(id, param.device(), {p, g, l, t, grad_scale.storage()},
                     {p, m.storage(), v.storage()}, &kernels::cpu::adam<T>, args, f, site);
    else
      kernels::queue(id, param.device(), {p, g, l, t}, {p, m.storage(), v.storage()},
                     &kernels::cpu::adam<T>, args, f, site);
  });
}

void increment_(Tensor& counter, Site site) {
  const OpId id = OpId::increment_;
  const char* op = op_name(id);
  check_operand(counter, "counter", id);
  TIDE_CHECK(
      (counter.dtype() == DType::int64 || counter.dtype() == DType::int32) && counter.numel() == 1,
      op, "counter must be a one-element int32 or int64 tensor, got ", describe(counter));
  check_writable(counter, "counter", op);
  Storage* s = counter.storage();
  if (counter.dtype() == DType::int64)
    kernels::queue(id, counter.device(), {s}, {s}, &kernels::cpu::increment<int64_t>,
                   kernels::Increment<int64_t>{counter.ref<int64_t>()}, kernels::NoExtra{}, site);
  else
    kernels::queue(id, counter.device(), {s}, {s}, &kernels::cpu::increment<int32_t>,
                   kernels::Increment<int32_t>{counter.ref<int32_t>()}, kernels::NoExtra{}, site);
}

void WarmupCosineOptions::check() const {
  const char* op = op_name(OpId::warmup_cosine_lr_);
  TIDE_CHECK(std::isfinite(lr_) && std::isfinite(min_lr_) && min_lr_ >= 0 && min_lr_ <= lr_, op,
             "invalid lr ", lr_, " and min_lr ", min_lr_,
             " (expected finite values with 0 <= min_lr <= lr)");
  TIDE_CHECK(warmup_ >= 0 && decay_steps_ >= warmup_, op, "invalid warmup ", warmup_,
             " and decay_steps ", decay_steps_, " (expected 0 <= warmup <= decay_steps)");
}

void warmup_cosine_lr_(Tensor& lr, const Tensor& step, const WarmupCosineOptions& o, Site site) {
  const OpId id = OpId::warmup_cosine_lr_;
  const char* op = op_name(id);
  check_operand(lr, "lr", id);
  TIDE_CHECK(is_floating(lr.dtype()) && lr.numel() == 1, op,
             "lr must be a one-element float32 or float64 tensor, got ", describe(lr));
  check_scalar(step, "step", DType::int64, lr, id);
  o.check();
  check_writable(lr, "lr", op);
  check_no_overlap({{lr, "lr", true}, {step, "step", false}}, op);
  fn::WarmupCosine f{o.lr_, o.min_lr_, static_cast<long long>(o.warmup_),
                     static_cast<long long>(o.decay_steps_)};
  dispatch_floating(lr.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::queue(id, lr.device(), {step.storage()}, {lr.storage()},
                   &kernels::cpu::warmup_cosine<T>,
                   kernels::LrSchedule<T>{lr.ref<T>(), step.ref<int64_t>()}, f, site);
  });
}

}  // namespace tide
