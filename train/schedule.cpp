// Learning-rate schedules as one queued op per step (see schedule.h).
#include "train/schedule.h"

#include "ops/autograd.h"
#include "ops/functors.h"

namespace tide::train {

namespace {
fn::WarmupCosine functor(const WarmupCosineOptions& o) {
  return {o.lr_, o.min_lr_, static_cast<long long>(o.warmup_),
          static_cast<long long>(o.decay_steps_)};
}
}  // namespace

WarmupCosine::WarmupCosine(Optimizer& optimizer, const WarmupCosineOptions& options)
    : optimizer_(optimizer), opt_(options) {
  opt_.check();  // before the optimizer gets a step tensor: a bad schedule changes nothing
  (void)optimizer_.step_tensor();
}

void WarmupCosine::step() {
  NoGrad no_grad;
  Tensor lr = optimizer_.lr_tensor();  // a handle on the same storage: the write lands there
  warmup_cosine_lr_(lr, optimizer_.step_tensor(), opt_);
}

double WarmupCosine::lr_at(int64_t it) const { return functor(opt_)(static_cast<long long>(it)); }

}  // namespace tide::train
