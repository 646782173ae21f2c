// Optimizer steps as one fused queued update per parameter under NoGrad (see optimizer.h),
// parameter groups and the fused gradient clip.
#include "train/optimizer.h"

#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "core/memory_record.h"
#include "nn/module.h"
#include "ops/autocast.h"
#include "ops/autograd.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/optim.h"
#include "train/clip.h"

namespace tide::train {

namespace {
void check_lr(double lr, const std::string& name) {
  TIDE_CHECK(std::isfinite(lr) && lr >= 0, name, "invalid learning rate ", lr,
             " (expected a finite value >= 0)");
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> g(1);
  g[0].params = std::move(params);
  return g;
}
}  // namespace

std::vector<ParamGroup> decay_groups(const nn::Module& module, double weight_decay) {
  TIDE_CHECK(std::isfinite(weight_decay) && weight_decay >= 0, "decay_groups",
             "invalid weight decay ", weight_decay, " (expected a finite value >= 0)");
  std::vector<ParamGroup> groups(2);
  groups[0].weight_decay = weight_decay;
  groups[1].weight_decay = 0.0;
  std::unordered_map<uintptr_t, bool> seen;
  for (auto& [name, p] : module.named_parameters()) {
    if (!seen.emplace(p.id(), true).second) continue;  // tied: updated once
    groups[p.ndim() >= 2 ? 0 : 1].params.push_back(p);
  }
  return groups;
}

Optimizer::Optimizer(std::vector<Tensor> params, double lr, std::string name)
    : Optimizer(one_group(std::move(params)), lr, std::move(name)) {}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, std::string name)
    : groups_(std::move(groups)), name_(std::move(name)) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::optional<double>& wd = groups_[g].weight_decay;
    TIDE_CHECK(!wd || (std::isfinite(*wd) && *wd >= 0), name_, "invalid weight decay ",
               wd.value_or(0), " of parameter group ", g, " (expected a finite value >= 0)");
    for (const Tensor& p : groups_[g].params) {
      params_.push_back(p);
      group_of_.push_back(g);
    }
  }
  TIDE_CHECK(!params_.empty(), name_, "empty parameter list");
  // One group (the list constructors) checks and words as before groups; several also
  // name the group, and refuse a parameter in two of them (PyTorch does too).
  const bool several = groups_.size() > 1;
  std::unordered_map<uintptr_t, size_t> first;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const std::string where = several ? " (group " + std::to_string(group_of_[i]) + ")" : "";
    TIDE_CHECK(p.defined(), name_, "parameter ", i, where, " is undefined");
    TIDE_CHECK(is_floating(p.dtype()), name_, "parameter ", i, where, " has dtype ", p.dtype(),
               " (expected a floating dtype)");
    TIDE_CHECK(p.requires_grad() && p.is_leaf(), name_, "parameter ", i, where, " of shape ",
               p.shape().str(), " is not a leaf that requires grad");
    TIDE_CHECK(p.dtype() == params_[0].dtype() && p.device() == params_[0].device(), name_,
               "parameter ", i, where, " has dtype ", p.dtype(), " but parameter 0 has ",
               params_[0].dtype(), " (all parameters must share dtype and device)");
    if (several) {
      auto [it, fresh] = first.emplace(p.id(), i);
      TIDE_CHECK(fresh || group_of_[it->second] == group_of_[i], name_, "parameter ", i, where,
                 " of shape ", p.shape().str(), " is parameter ", it->second, " (group ",
                 group_of_[it->second], ") too (expected each parameter in one group)");
    }
  }
  check_lr(lr, name_);
  masters_.resize(params_.size());
  lr_host_ = lr;
  lr_ = scalar(lr);
}

DType Optimizer::state_dtype() const {
  return is_half(params_[0].dtype()) ? DType::float32 : params_[0].dtype();
}

Tensor Optimizer::scalar(double v) const {
  memory::RoleScope role(memory::Role::optimizer_state);  // the learning rate, kept all run
  return full(Shape{}, v, state_dtype(), params_[0].device());
}

Tensor& Optimizer::update_target(size_t i) {
  Tensor& p = params_[i];
  if (!is_half(p.dtype())) return p;
  if (!masters_[i].defined()) {
    memory::RoleScope role(memory::Role::optimizer_state);
    masters_[i] = cast(p, DType::float32);
  }
  return masters_[i];
}

Tensor Optimizer::update_grad(const Tensor& g) const {
  return g.dtype() == state_dtype() ? g : cast(g, state_dtype());
}

void Optimizer::write_back(size_t i) {
  if (is_half(params_[i].dtype())) params_[i].copy_(cast(masters_[i], params_[i].dtype()));
}

Tensor Optimizer::new_state(size_t i, const char* tag, bool& fresh) const {
  memory::RoleScope role(memory::Role::optimizer_state);
  const Tensor& p = params_[i];
  fresh = !zero_state_;
  if (zero_state_) return zeros(p.shape(), state_dtype(), p.device());
  return Tensor::empty(p.shape(), state_dtype(), p.device(), tag);
}

void Optimizer::advance_step(const Tensor& scale) {
  if (!may_skip_ || !scale.defined()) {
    increment_(step_);
    return;
  }
  // +1 when scale is finite (scale * 0 == 0), +0 when the updates skip.
  step_.add_(cast(eq(mul(scale, 0.0), 0.0), DType::int64));
}

void Optimizer::scale_next_step(const Tensor& scale) {
  TIDE_CHECK(scale.defined() && scale.ndim() == 0 && is_floating(scale.dtype()) &&
                 scale.device() == params_[0].device(),
             name_, "the grad scale must be a 0-d floating tensor on ", params_[0].device().str(),
             ", got ",
             scale.defined() ? scale.shape().str() + " " + std::string(tide::name(scale.dtype())) +
                                   " on " + scale.device().str()
                             : std::string("an undefined tensor"));
  NoGrad no_grad;
  Tensor s = scale.dtype() == state_dtype() ? scale : cast(scale, state_dtype());
  grad_scale_ = grad_scale_.defined() ? mul(grad_scale_, s) : s;
  may_skip_ = true;
  zero_state_ = true;
}

double Optimizer::weight_decay_of(size_t i, double fallback) const {
  return groups_[group_of_[i]].weight_decay.value_or(fallback);
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
  grad_scale_ = Tensor();
  may_skip_ = false;
}

const Tensor& Optimizer::step_tensor() {
  if (!step_.defined()) {
    memory::RoleScope role(memory::Role::optimizer_state);
    step_ = full(Shape{}, double(steps_), DType::int64, params_[0].device());
  }
  return step_;
}

Tensor Optimizer::clip_grad_norm(double max_norm) {
  TIDE_CHECK(max_norm > 0, name_, "invalid max_norm ", max_norm, " (expected a value > 0)");
  NoGrad no_grad;
  Tensor norm = grad_norm(params_);
  if (norm.dtype() != state_dtype()) norm = cast(norm, state_dtype());
  // A pending scale (a GradScaler's 1 / scale) applies first: the norm of the unscaled
  // gradients decides the clip.
  if (grad_scale_.defined()) norm = mul(norm, grad_scale_);
  Tensor clip = clip_scale(norm, max_norm);
  grad_scale_ = grad_scale_.defined() ? mul(grad_scale_, clip) : clip;
  return norm;
}

Tensor Optimizer::take_grad_scale() {
  Tensor s = std::move(grad_scale_);
  grad_scale_ = Tensor();
  return s;
}

void Optimizer::set_lr(double lr) {
  check_lr(lr, name_);
  lr_host_ = lr;
  // Queued: steps already queued read the old value (hazard tracking orders the write
  // after them), the next step reads the new one.
  lr_.copy_(scalar(lr));
}

// ---- SGD -----------------------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, const SGDOptions& o)
    : Optimizer(std::move(params), o.lr_, "sgd"), opt_(o) {
  check_options();
}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& o)
    : Optimizer(std::move(groups), o.lr_, "sgd"), opt_(o) {
  check_options();
}

void SGD::check_options() {
  const SGDOptions& o = opt_;
  TIDE_CHECK(o.momentum_ >= 0, "sgd", "invalid momentum ", o.momentum_, " (expected >= 0)");
  TIDE_CHECK(o.dampening_ >= 0, "sgd", "invalid dampening ", o.dampening_, " (expected >= 0)");
  TIDE_CHECK(o.weight_decay_ >= 0, "sgd", "invalid weight decay ", o.weight_decay_,
             " (expected >= 0)");
  TIDE_CHECK(!o.nesterov_ || (o.momentum_ > 0 && o.dampening_ == 0), "sgd",
             "Nesterov momentum requires a momentum > 0 and zero dampening (momentum ", o.momentum_,
             ", dampening ", o.dampening_, ")");
  buf_.resize(params_.size());
}

void SGD::step() {
  NoGrad no_grad;
  autocast::clear_cache();  // the weights change
  const Tensor scale = take_grad_scale();
  // Counted on the device only once something reads the count (step_tensor()).
  if (step_.defined()) advance_step(scale);
  SgdUpdateOptions o = SgdUpdateOptions()
                           .momentum(opt_.momentum_)
                           .dampening(opt_.dampening_)
                           .nesterov(opt_.nesterov_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    Tensor& p = update_target(i);
    Tensor& buf = buf_[i];
    bool fresh = false;
    if (opt_.momentum_ != 0 && !buf.defined()) buf = new_state(i, "sgd", fresh);
    sgd_update_(p, update_grad(g), buf, lr_, scale,
                SgdUpdateOptions(o)
                    .weight_decay(weight_decay_of(i, opt_.weight_decay_))
                    .fresh_state(fresh));
    write_back(i);
  }
  ++steps_;
}

// ---- Adam / AdamW --------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o)
    : Adam({ParamGroup{std::move(params), std::nullopt}}, o, false, "adam") {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& o)
    : Adam(std::move(groups), o, false, "adam") {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& o, bool decoupled, const char* name)
    : Optimizer(std::move(groups), o.lr_, name), opt_(o), decoupled_(decoupled) {
  TIDE_CHECK(o.beta1_ >= 0 && o.beta1_ < 1, name, "invalid beta1 ", o.beta1_,
             " (expected 0 <= beta1 < 1)");
  TIDE_CHECK(o.beta2_ >= 0 && o.beta2_ < 1, name, "invalid beta2 ", o.beta2_,
             " (expected 0 <= beta2 < 1)");
  TIDE_CHECK(o.eps_ >= 0, name, "invalid eps ", o.eps_, " (expected >= 0)");
  TIDE_CHECK(o.weight_decay_ >= 0, name, "invalid weight decay ", o.weight_decay_,
             " (expected >= 0)");
  memory::RoleScope role(memory::Role::optimizer_state);
  step_ = full(Shape{}, 0.0, DType::int64, params_[0].device());
  m_.resize(params_.size());
  v_.resize(params_.size());
}

void Adam::step() {
  NoGrad no_grad;
  autocast::clear_cache();  // the weights change
  const Tensor scale = take_grad_scale();
  // t lives in memory and is advanced by a queued op; the kernels read it when they run.
  advance_step(scale);
  AdamUpdateOptions o =
      AdamUpdateOptions().betas(opt_.beta1_, opt_.beta2_).eps(opt_.eps_).decoupled(decoupled_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    Tensor& p = update_target(i);
    bool fresh = false;
    if (!m_[i].defined()) {
      const char* tag = decoupled_ ? "adamw" : "adam";  // a literal: allocation hooks may keep it
      m_[i] = new_state(i, tag, fresh);
      v_[i] = new_state(i, tag, fresh);
    }
    adam_update_(p, update_grad(g), m_[i], v_[i], lr_, step_, scale,
                 AdamUpdateOptions(o)
                     .weight_decay(weight_decay_of(i, opt_.weight_decay_))
                     .fresh_state(fresh));
    write_back(i);
  }
  ++steps_;
}

}  // namespace tide::train
