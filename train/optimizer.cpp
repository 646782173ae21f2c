// Optimizer steps as one fused queued update per parameter under NoGrad (see optimizer.h).
#include "train/optimizer.h"

#include <cmath>

#include "core/error.h"
#include "ops/autograd.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/optim.h"

namespace tide::train {

namespace {
void check_lr(double lr, const std::string& name) {
  TIDE_CHECK(std::isfinite(lr) && lr >= 0, name, "invalid learning rate ", lr,
             " (expected a finite value >= 0)");
}
}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr, std::string name)
    : params_(std::move(params)), name_(std::move(name)) {
  TIDE_CHECK(!params_.empty(), name_, "empty parameter list");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    TIDE_CHECK(p.defined(), name_, "parameter ", i, " is undefined");
    TIDE_CHECK(is_floating(p.dtype()), name_, "parameter ", i, " has dtype ", p.dtype(),
               " (expected a floating dtype)");
    TIDE_CHECK(p.requires_grad() && p.is_leaf(), name_, "parameter ", i, " of shape ",
               p.shape().str(), " is not a leaf that requires grad");
    TIDE_CHECK(p.dtype() == params_[0].dtype() && p.device() == params_[0].device(), name_,
               "parameter ", i, " has dtype ", p.dtype(), " but parameter 0 has ",
               params_[0].dtype(), " (all parameters must share dtype and device)");
  }
  check_lr(lr, name_);
  lr_host_ = lr;
  lr_ = scalar(lr);
}

Tensor Optimizer::scalar(double v) const {
  return full(Shape{}, v, params_[0].dtype(), params_[0].device());
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
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
  SgdUpdateOptions o = SgdUpdateOptions()
                           .momentum(opt_.momentum_)
                           .dampening(opt_.dampening_)
                           .nesterov(opt_.nesterov_)
                           .weight_decay(opt_.weight_decay_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor& buf = buf_[i];
    bool fresh = opt_.momentum_ != 0 && !buf.defined();
    if (fresh) buf = Tensor::empty(p.shape(), p.dtype(), p.device(), "sgd");
    sgd_update_(p, g, buf, lr_, SgdUpdateOptions(o).fresh_state(fresh));
  }
  ++steps_;
}

// ---- Adam / AdamW --------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o)
    : Adam(std::move(params), o, false, "adam") {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o, bool decoupled, const char* name)
    : Optimizer(std::move(params), o.lr_, name), opt_(o), decoupled_(decoupled) {
  TIDE_CHECK(o.beta1_ >= 0 && o.beta1_ < 1, name, "invalid beta1 ", o.beta1_,
             " (expected 0 <= beta1 < 1)");
  TIDE_CHECK(o.beta2_ >= 0 && o.beta2_ < 1, name, "invalid beta2 ", o.beta2_,
             " (expected 0 <= beta2 < 1)");
  TIDE_CHECK(o.eps_ >= 0, name, "invalid eps ", o.eps_, " (expected >= 0)");
  TIDE_CHECK(o.weight_decay_ >= 0, name, "invalid weight decay ", o.weight_decay_,
             " (expected >= 0)");
  step_ = full(Shape{}, 0.0, DType::int64, params_[0].device());
  m_.resize(params_.size());
  v_.resize(params_.size());
}

void Adam::step() {
  NoGrad no_grad;
  // t lives in memory and is advanced by a queued op; the kernels read it when they run.
  increment_(step_);
  AdamUpdateOptions o = AdamUpdateOptions()
                            .betas(opt_.beta1_, opt_.beta2_)
                            .eps(opt_.eps_)
                            .weight_decay(opt_.weight_decay_)
                            .decoupled(decoupled_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    bool fresh = !m_[i].defined();
    if (fresh) {
      const char* tag = decoupled_ ? "adamw" : "adam";  // a literal: allocation hooks may keep it
      m_[i] = Tensor::empty(p.shape(), p.dtype(), p.device(), tag);
      v_[i] = Tensor::empty(p.shape(), p.dtype(), p.device(), tag);
    }
    adam_update_(p, g, m_[i], v_[i], lr_, step_, AdamUpdateOptions(o).fresh_state(fresh));
  }
  ++steps_;
}

}  // namespace tide::train
