// Gradient clipping by the global norm as queued ops (see clip.h).
#include "train/clip.h"

#include "core/error.h"
#include "ops/autograd.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

namespace tide::train {

namespace {

constexpr const char* kOp = "clip_grad_norm_";

// The gradients of params that have one, checked to share dtype and device.
std::vector<Tensor> gradients(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  size_t first = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    TIDE_CHECK(params[i].defined(), kOp, "parameter ", i, " is undefined");
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    if (grads.empty()) first = i;
    const Tensor& g0 = grads.empty() ? g : grads[0];
    TIDE_CHECK(is_floating(g.dtype()) && g.dtype() == g0.dtype() && g.device() == g0.device(), kOp,
               "the gradient of parameter ", i, " is ", g.dtype(), " on ", g.device().str(),
               " but that of parameter ", first, " is ", g0.dtype(), " on ", g0.device().str(),
               " (expected floating gradients of one dtype on one device)");
    grads.push_back(std::move(g));
  }
  return grads;
}

void check_max_norm(double max_norm) {
  TIDE_CHECK(max_norm > 0, kOp, "invalid max_norm ", max_norm, " (expected a value > 0)");
}

Tensor norm_of(const std::vector<Tensor>& grads, const std::vector<Tensor>& params) {
  NoGrad no_grad;
  if (grads.empty()) {
    // No gradient: PyTorch's 0. With no parameter either, a float32 0 on the CPU.
    if (params.empty()) return zeros(Shape{}, DType::float32);
    return zeros(Shape{}, params[0].dtype(), params[0].device());
  }
  // One reduction per gradient, then the sums in order: the same bits every run. No squared
  // copy of a gradient is made: queued, those held a whole copy of the gradients at once.
  Tensor total;
  for (const Tensor& g : grads) {
    Tensor s = sum_squares(g);
    total = total.defined() ? add(total, s) : s;
  }
  return sqrt(total);
}

}  // namespace

Tensor grad_norm(const std::vector<Tensor>& params) { return norm_of(gradients(params), params); }

Tensor clip_scale(const Tensor& norm, double max_norm) {
  check_max_norm(max_norm);
  TIDE_CHECK(norm.defined() && norm.ndim() == 0 && is_floating(norm.dtype()), kOp,
             "the norm must be a 0-d floating tensor, got ",
             norm.defined() ? norm.shape().str() + " " + std::string(name(norm.dtype()))
                            : std::string("an undefined tensor"));
  NoGrad no_grad;
  // min(1, max_norm / d) as max_norm / max(d, max_norm), d = norm + 1e-6: the same division
  // as PyTorch's when it clips, and exactly 1 when it does not (a NaN norm stays NaN).
  return rdiv(max_norm, maximum(add(norm, 1e-6), max_norm));
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  check_max_norm(max_norm);
  std::vector<Tensor> grads = gradients(params);
  Tensor norm = norm_of(grads, params);
  if (grads.empty()) return norm;
  Tensor scale = clip_scale(norm, max_norm);
  NoGrad no_grad;
  for (Tensor& g : grads) g.mul_(scale);
  return norm;
}

}  // namespace tide::train
