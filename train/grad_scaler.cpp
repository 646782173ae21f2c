// GradScaler (train/grad_scaler.h): the scale, the overflow check and the update as queued
// 0-d ops; x * 0 is 0 for a finite x and NaN otherwise, which turns "finite" into arithmetic.
#include "train/grad_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/memory_record.h"
#include "ops/autograd.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

namespace tide::train {

namespace {
constexpr const char* kOp = "grad_scaler";
}  // namespace

GradScaler::GradScaler(Device device, GradScalerOptions options) : opt_(options), device_(device) {
  const GradScalerOptions& o = opt_;
  TIDE_CHECK(std::isfinite(o.init_scale_) && o.init_scale_ > 0, kOp, "invalid init_scale ",
             o.init_scale_, " (expected a finite value > 0)");
  TIDE_CHECK(std::isfinite(o.growth_factor_) && o.growth_factor_ > 1, kOp, "invalid growth_factor ",
             o.growth_factor_, " (expected a finite value > 1)");
  TIDE_CHECK(o.backoff_factor_ > 0 && o.backoff_factor_ < 1, kOp, "invalid backoff_factor ",
             o.backoff_factor_, " (expected 0 < backoff_factor < 1)");
  // The tracker counts in float32, exact up to 2^24.
  TIDE_CHECK(o.growth_interval_ >= 1 && o.growth_interval_ <= (int64_t(1) << 24), kOp,
             "invalid growth_interval ", o.growth_interval_, " (expected 1 to 2^24)");
  memory::RoleScope role(memory::Role::optimizer_state);
  scale_ = full(Shape{}, o.init_scale_, DType::float32, device_);
  tracker_ = zeros(Shape{}, DType::float32, device_);
  found_inf_ = zeros(Shape{}, DType::float32, device_);
}

Tensor GradScaler::scale(const Tensor& loss) {
  TIDE_CHECK(loss.defined(), kOp, "scale() got an undefined loss");
  if (!opt_.enabled_) return loss;
  TIDE_CHECK(loss.dtype() == DType::float32 && loss.device() == device_, kOp,
             "the loss must be float32 on ", device_.str(), " (the scaler's device), got ",
             loss.dtype(), " on ", loss.device().str());
  return mul(loss, scale_);
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!opt_.enabled_) return;
  TIDE_CHECK(std::find(unscaled_.begin(), unscaled_.end(), &opt) == unscaled_.end(), kOp,
             "unscale_() was already called for optimizer '", opt.name(),
             "' since the last update()");
  NoGrad no_grad;
  Tensor sums;
  for (const Tensor& p : opt.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor s = sum_squares(g);
    if (s.dtype() != DType::float32) s = cast(s, DType::float32);
    sums = sums.defined() ? add(sums, s) : s;
  }
  if (!sums.defined()) sums = zeros(Shape{}, DType::float32, device_);
  // 0 when every gradient is finite, NaN otherwise.
  Tensor bad = mul(sums, 0.0);
  sums_ = sums_.defined() ? add(sums_, bad) : bad;
  // 1 / scale, or NaN: the optimizer's step then skips on the device.
  opt.scale_next_step(add(rdiv(1.0, scale_), bad));
  unscaled_.push_back(&opt);
}

void GradScaler::step(Optimizer& opt) {
  if (opt_.enabled_ && std::find(unscaled_.begin(), unscaled_.end(), &opt) == unscaled_.end())
    unscale_(opt);
  opt.step();
}

void GradScaler::update() {
  if (!opt_.enabled_) return;
  NoGrad no_grad;
  // No unscale_ this step: nothing was checked, as a clean step.
  Tensor bad = sums_.defined() ? sums_ : zeros(Shape{}, DType::float32, device_);
  Tensor ok = eq(bad, 0.0);      // 1: every gradient finite
  Tensor found = rsub(1.0, ok);  // 1: an overflow
  Tensor run = mul(add(tracker_, 1.0), ok);
  Tensor grow = eq(run, double(opt_.growth_interval_));
  // ok * (1 + grow * (growth - 1)) + found * backoff: exactly 1, growth or backoff.
  Tensor factor =
      add(mul(ok, add(mul(grow, opt_.growth_factor_ - 1), 1.0)), mul(found, opt_.backoff_factor_));
  scale_.copy_(mul(scale_, factor));
  tracker_.copy_(mul(run, rsub(1.0, grow)));
  found_inf_.copy_(found);
  sums_ = Tensor();
  unscaled_.clear();
}

std::unique_ptr<GradScaler> scaler_for(std::optional<DType> low, Device device) {
  if (low != DType::float16) return nullptr;
  return std::make_unique<GradScaler>(device);
}

void scaled_backward(const Tensor& loss, GradScaler* scaler) {
  (scaler ? scaler->scale(loss) : loss).backward();
}

void scaled_step(Optimizer& opt, GradScaler* scaler) {
  if (!scaler) {
    opt.step();
    return;
  }
  scaler->step(opt);
  scaler->update();
}

}  // namespace tide::train
