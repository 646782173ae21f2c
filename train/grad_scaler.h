// GradScaler: dynamic loss scaling for float16 training (DESIGN §12), as PyTorch's
// torch.amp.GradScaler, with every decision on the device: the overflow check, the skipped
// step and the growth/backoff of the scale are queued ops, so a scaled step never waits
// and traces like any other step.
//
//   GradScaler scaler;
//   { Autocast amp(DType::float16); loss = model.loss(x, y); }
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);         // optional: before opt.clip_grad_norm
//   opt.clip_grad_norm(1.0);      // clips the unscaled gradients
//   scaler.step(opt);             // skipped on the device when a gradient is inf or NaN
//   scaler.update();              // backoff after an overflow, growth after N clean steps
//
// The check: sum_squares of each gradient (accumulated in double for float32 gradients); a
// non-finite sum marks an overflow, so an element whose square overflows (|g| >= 1.8e19 in
// float32) counts as one too and the scale backs off. Not done: sparse gradients, a scaler
// per optimizer group.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/options.h"
#include "core/tensor.h"
#include "train/optimizer.h"

namespace tide::train {

struct GradScalerOptions {
  TIDE_ARG(double, init_scale) = 65536.0;  // 2^16, PyTorch's
  TIDE_ARG(double, growth_factor) = 2.0;
  TIDE_ARG(double, backoff_factor) = 0.5;
  TIDE_ARG(int64_t, growth_interval) = 2000;  // clean steps before the scale grows
  TIDE_ARG(bool, enabled) = true;             // false: every call passes through
};

class GradScaler {
 public:
  // The scale lives on `device` as a 0-d float32 tensor. Throws "[grad_scaler]" unless
  // init_scale > 0 and finite, growth_factor > 1, 0 < backoff_factor < 1 and
  // 1 <= growth_interval <= 2^24.
  explicit GradScaler(Device device = Device::cpu(), GradScalerOptions options = {});

  // loss * scale (queued; loss's dtype must be float32, as autocast leaves losses). Throws
  // "[grad_scaler]" for an undefined loss, another dtype or another device.
  Tensor scale(const Tensor& loss);
  // Queues the overflow check of opt's gradients and hands opt its next step's grad scale:
  // 1 / scale, or NaN after an overflow, so the step skips (Optimizer::scale_next_step).
  // Once per optimizer per step; a second call throws "[grad_scaler]". Does not wait.
  void unscale_(Optimizer& opt);
  // unscale_(opt) unless already called this step, then opt.step(). Does not wait.
  void step(Optimizer& opt);
  // Queues the scale's update from this step's checks: times backoff_factor after an
  // overflow, times growth_factor after growth_interval clean steps in a row; then a new
  // step may begin. Does not wait.
  void update();

  // The 0-d float32 scale (reading it waits).
  const Tensor& scale_tensor() const { return scale_; }
  // 1 when the last update()'s step found an inf or NaN gradient, else 0 (0-d float32).
  const Tensor& found_inf() const { return found_inf_; }
  // Clean steps since the last growth or backoff (0-d float32).
  const Tensor& growth_tracker() const { return tracker_; }
  const GradScalerOptions& options() const { return opt_; }

 private:
  GradScalerOptions opt_;
  Device device_;
  Tensor scale_, tracker_, found_inf_;
  Tensor sums_;  // this step's checks: 0 when every gradient was finite, else inf or NaN
  std::vector<const Optimizer*> unscaled_;
};

// The scaler a step under Autocast(low) needs: one on `device` for float16; nullptr for
// bfloat16 and for no autocast (nullopt), which need no loss scaling.
std::unique_ptr<GradScaler> scaler_for(std::optional<DType> low, Device device);
// loss.backward(), of scaler->scale(loss) when `scaler` is set. Does not wait.
void scaled_backward(const Tensor& loss, GradScaler* scaler);
// opt.step(), or with `scaler` set scaler->step(opt) then scaler->update(). Does not wait.
void scaled_step(Optimizer& opt, GradScaler* scaler);

}  // namespace tide::train
